output "buckets" {
  description = "Buckets by name: name, path and URL."
  value       = { for name, b in module.bucket : name => b.bucket }
}
