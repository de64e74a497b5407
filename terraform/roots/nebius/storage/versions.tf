# Storage root for the `nebius` cloud: the checkpoint buckets. It is kept by `rlinfra down` and only
# destroyed by `rlinfra down --delete-buckets` (which empties the buckets first; the provider has
# no force_destroy).
terraform {
  required_version = ">= 1.5, < 2.0"

  required_providers {
    nebius = {
      source = "nebius/nebius"
      # The provider schema the modules and this root are checked against
      # (terraform/schemas/nebius-0.6.32.json; tests/terraform/test_nebius_modules.py).
      version = "= 0.6.32"
    }
  }
}
