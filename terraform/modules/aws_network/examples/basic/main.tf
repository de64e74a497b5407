# A new VPC with one public subnet:
#
#   terraform init && terraform apply -var availability_zone=us-east-1a
#   terraform destroy -var availability_zone=us-east-1a

terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "region" {
  description = "AWS region of the example."
  type        = string
  default     = "us-east-1"
}

variable "availability_zone" {
  description = "Availability zone of the subnet."
  type        = string
  default     = "us-east-1a"
}

variable "existing_subnet_id" {
  description = "Use this subnet instead of making a network."
  type        = string
  default     = null
}

provider "aws" {
  region = var.region

  default_tags {
    tags = { "managed-by" = "rlinfra", "rlinfra:cluster" = "example" }
  }
}

module "network" {
  source = "../.."

  name               = "example"
  availability_zone  = var.availability_zone
  existing_subnet_id = var.existing_subnet_id
  tags               = { "managed-by" = "rlinfra", "rlinfra:cluster" = "example" }
}

output "network" {
  description = "VPC, subnet and zone."
  value       = module.network.network
}
