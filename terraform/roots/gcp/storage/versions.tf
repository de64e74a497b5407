# Storage root rendered by rlinfra for the `gcp` cloud: the checkpoint buckets. It is kept by
# `rlinfra down` and only destroyed by `rlinfra down --delete-buckets` (a bucket that still holds
# objects is never emptied by Terraform: force_destroy is off).
terraform {
  required_version = ">= 1.5, < 2.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # The provider schema the modules and these roots are checked against
      # (tests/terraform/test_gcp_modules.py, test_gcp_roots.py).
      version = "= 6.50.0"
    }
  }
}
