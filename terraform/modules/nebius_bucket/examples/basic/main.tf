# A private, versioned checkpoint bucket:
#
#   export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)
#   terraform init && terraform apply -var parent_id=project-e00... -var name=my-checkpoints-1234
#   terraform destroy -var parent_id=project-e00... -var name=my-checkpoints-1234
#
# Empty the bucket (every object version) before destroying it: the provider has no force_destroy.

terraform {
  required_version = ">= 1.5"

  required_providers {
    nebius = {
      source  = "nebius/nebius"
      version = "~> 0.6.32"
    }
  }
}

variable "parent_id" {
  description = "Nebius project of the bucket."
  type        = string
}

variable "name" {
  description = "Bucket name."
  type        = string
}

provider "nebius" {}

module "bucket" {
  source = "../.."

  name      = var.name
  parent_id = var.parent_id
  labels    = { "managed-by" = "rlinfra" }
}

output "bucket" {
  description = "Name, id, endpoint, region and domain name of the bucket."
  value       = module.bucket.bucket
}
