# Cluster root for the `nebius` cloud: network, subnet and security group (its rules), the GPU
# cluster when the nodes join InfiniBand, the boot disks and the nodes. State stays in the
# deployment folder.
terraform {
  # 1.9: the nebius_network and nebius_cluster modules' validations refer to other variables.
  required_version = ">= 1.9, < 2.0"

  required_providers {
    nebius = {
      source = "nebius/nebius"
      # The provider schema the modules and this root are checked against
      # (terraform/schemas/nebius-0.6.32.json; tests/terraform/test_nebius_modules.py).
      version = "= 0.6.32"
    }
  }
}
