output "buckets" {
  description = "Buckets by name: name, gs:// URL, self link and location."
  value       = { for name, b in module.bucket : name => b.bucket }
}
