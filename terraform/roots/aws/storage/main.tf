locals {
  emulated = length(var.endpoints) > 0

  tags = merge(var.tags, { "managed-by" = "rlinfra" })
}

provider "aws" {
  region      = var.region
  max_retries = var.max_retries

  s3_use_path_style           = local.emulated ? true : null
  skip_credentials_validation = local.emulated ? true : null
  skip_metadata_api_check     = local.emulated ? true : null
  skip_requesting_account_id  = local.emulated ? true : null

  dynamic "endpoints" {
    for_each = local.emulated ? [var.endpoints] : []
    content {
      ec2 = lookup(endpoints.value, "ec2", null)
      s3  = lookup(endpoints.value, "s3", null)
      sts = lookup(endpoints.value, "sts", null)
      iam = lookup(endpoints.value, "iam", null)
    }
  }

  default_tags {
    tags = local.tags
  }
}

module "bucket" {
  source   = "./modules/aws_bucket"
  for_each = toset(var.buckets)

  name                    = each.value
  encryption              = var.encryption
  noncurrent_version_days = var.noncurrent_version_days
  tags                    = local.tags
}
