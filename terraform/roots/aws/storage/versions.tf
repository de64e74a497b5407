# Storage root rendered by rlinfra for the `aws` cloud: the checkpoint buckets. It is kept by
# `rlinfra down` and only destroyed by `rlinfra down --delete-buckets` (a bucket that still holds
# objects is never emptied by Terraform: force_destroy is off).
terraform {
  required_version = ">= 1.5, < 2.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 5.100.0"
    }
  }
}
