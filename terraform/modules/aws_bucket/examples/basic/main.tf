# A private, versioned, encrypted checkpoint bucket:
#
#   terraform init && terraform apply -var name=my-checkpoints-1234
#   terraform destroy -var name=my-checkpoints-1234   # fails while the bucket holds objects

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
  description = "AWS region of the bucket."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Globally unique bucket name."
  type        = string
}

provider "aws" {
  region = var.region

  default_tags {
    tags = { "managed-by" = "rlinfra" }
  }
}

module "bucket" {
  source = "../.."

  name = var.name
  tags = { "managed-by" = "rlinfra" }
}

output "bucket" {
  description = "Name, ARN and region of the bucket."
  value       = module.bucket.bucket
}
