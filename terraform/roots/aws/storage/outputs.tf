output "buckets" {
  description = "Buckets by name: name, ARN and region."
  value       = { for name, b in module.bucket : name => b.bucket }
}
