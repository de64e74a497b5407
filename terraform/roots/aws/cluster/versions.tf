# Cluster root rendered by rlinfra for the `aws` cloud: network, security group, key pair,
# placement group, IAM role and the nodes. State stays in the deployment folder unless the driver
# writes a backend.tf next to this file.
terraform {
  # 1.9: the aws_cluster module's validations refer to other variables.
  required_version = ">= 1.9, < 2.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 5.100.0"
    }
  }
}
