locals {
  labels = merge(var.labels, { "managed-by" = "rlinfra" })
}

# Credentials come from the environment, never from variables: NEBIUS_IAM_TOKEN (for example
# `export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)`; a token lasts 12 hours).
provider "nebius" {}

module "bucket" {
  source   = "./modules/nebius_bucket"
  for_each = toset(var.buckets)

  name                    = each.value
  parent_id               = var.parent_id
  storage_class           = var.storage_class
  noncurrent_version_days = var.noncurrent_version_days
  labels                  = local.labels
}
