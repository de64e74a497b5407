output "buckets" {
  description = "Buckets by name: name, id, S3-compatible endpoint, region and domain name."
  value       = { for name, b in module.bucket : name => b.bucket }
}

output "endpoint" {
  description = "The S3-compatible endpoint of the project's region (what the nodes' S3 clients use)."
  value       = "https://storage.${var.region}.nebius.cloud"
}
