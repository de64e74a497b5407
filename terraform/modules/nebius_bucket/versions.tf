terraform {
  required_version = ">= 1.5"

  required_providers {
    nebius = {
      source = "nebius/nebius"
      # 0.6.32 is the provider schema this module is checked against (terraform/schemas/
      # nebius-0.6.32.json, from that release's documentation; tests/terraform/
      # test_nebius_modules.py); 0.7 may change it, hence the upper bound. The rendered root pins
      # the exact version.
      version = "~> 0.6.32"
    }
  }
}
