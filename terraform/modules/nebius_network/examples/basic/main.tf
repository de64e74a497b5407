# A new network and subnet for a cluster, with its security group, SSH open to one address:
#
#   export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)
#   terraform init
#   terraform apply -var parent_id=project-e00... -var 'allowed_cidrs=["203.0.113.7/32"]'
#   terraform destroy -var parent_id=project-e00... -var 'allowed_cidrs=["203.0.113.7/32"]'
#
# Credentials come from the environment (NEBIUS_IAM_TOKEN), never from variables.

terraform {
  required_version = ">= 1.9"

  required_providers {
    nebius = {
      source  = "nebius/nebius"
      version = "~> 0.6.32"
    }
  }
}

variable "parent_id" {
  description = "Nebius project of the example."
  type        = string
}

variable "allowed_cidrs" {
  description = "IPv4 ranges allowed to reach SSH."
  type        = list(string)
  default     = []
}

provider "nebius" {}

module "network" {
  source = "../.."

  name          = "example"
  parent_id     = var.parent_id
  allowed_cidrs = var.allowed_cidrs
  labels        = { "managed-by" = "rlinfra", "rlinfra-cluster" = "example" }
}

output "network" {
  description = "Network, subnet and security group ids."
  value       = module.network.network
}

output "security_rules" {
  description = "Names of the security rules."
  value       = module.network.security_rules
}
