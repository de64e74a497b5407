# A local bucket in ./buckets/example-bucket:
#
#   terraform init && terraform apply
#   terraform destroy

terraform {
  required_version = ">= 1.5"
}

variable "name" {
  description = "Bucket name."
  type        = string
  default     = "example-bucket"
}

variable "root" {
  description = "Absolute folder that holds local buckets; null means ./buckets next to this file."
  type        = string
  default     = null
}

module "bucket" {
  source = "../.."

  name = var.name
  root = coalesce(var.root, abspath("${path.root}/buckets"))
}

output "bucket" {
  description = "The local bucket."
  value       = module.bucket.bucket
}
