terraform {
  # 1.9 is the first release whose variable validations may refer to other variables
  # (allowed_cidrs checks allow_public).
  required_version = ">= 1.9"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.50 is the provider schema this module is checked against (tests/terraform/
      # test_gcp_modules.py); 7.0 is a major release with breaking changes it has not been read
      # against, hence the upper bound. The rendered root pins the exact version.
      version = "~> 6.50"
    }
  }
}
