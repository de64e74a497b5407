# A new VPC network and subnetwork for a cluster, SSH open to one address:
#
#   terraform init
#   terraform apply -var project=my-project -var 'allowed_cidrs=["203.0.113.7/32"]'
#   terraform destroy -var project=my-project -var 'allowed_cidrs=["203.0.113.7/32"]'
#
# Credentials come from the environment (gcloud auth application-default login), never from
# variables.

terraform {
  required_version = ">= 1.9"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
  }
}

variable "project" {
  description = "Project of the example."
  type        = string
}

variable "region" {
  description = "Region of the subnetwork."
  type        = string
  default     = "us-central1"
}

variable "allowed_cidrs" {
  description = "IPv4 ranges allowed to reach SSH."
  type        = list(string)
  default     = []
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = { "managed-by" = "rlinfra", "rlinfra-cluster" = "example" }
}

module "network" {
  source = "../.."

  name          = "example"
  region        = var.region
  allowed_cidrs = var.allowed_cidrs
}

output "network" {
  description = "Network, subnetwork, region and the nodes' network tag."
  value       = module.network.network
}

output "firewall_rules" {
  description = "Names of the firewall rules."
  value       = module.network.firewall_rules
}
