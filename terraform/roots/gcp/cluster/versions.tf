# Cluster root rendered by rlinfra for the `gcp` cloud: network and firewall rules, the nodes'
# service account and its bucket grant, the compact placement policy and the nodes. State stays in
# the deployment folder.
terraform {
  # 1.9: the gcp_network and gcp_cluster modules' validations refer to other variables.
  required_version = ">= 1.9, < 2.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # The provider schema the modules and these roots are checked against
      # (tests/terraform/test_gcp_modules.py, test_gcp_roots.py).
      version = "= 6.50.0"
    }
  }
}
