locals {
  labels = merge(var.labels, { "managed-by" = "rlinfra" })
}

# Credentials are Application Default Credentials (gcloud, GOOGLE_APPLICATION_CREDENTIALS or the
# VM's service account), never variables.
provider "google" {
  project = var.project
  region  = var.region

  default_labels = local.labels
}

module "bucket" {
  source   = "./modules/gcp_bucket"
  for_each = toset(var.buckets)

  name                    = each.value
  project                 = var.project
  location                = var.region
  kms_key_name            = var.kms_key_name
  noncurrent_version_days = var.noncurrent_version_days
  labels                  = local.labels
}
