# Two L4 nodes in a new network, reachable over SSH from one address, with a checkpoint bucket
# that only their service account may use:
#
#   ssh-keygen -t ed25519 -N '' -f ./id_ed25519
#   terraform init
#   terraform apply -var project=my-project -var bucket_name=my-checkpoints-1234 \
#     -var ssh_public_key_path=./id_ed25519.pub -var 'allowed_cidrs=["203.0.113.7/32"]'
#   ssh -i ./id_ed25519 ubuntu@$(terraform output -json inventory | jq -r '.nodes[0].ssh_host')
#   terraform destroy ...   # the same -var options; the bucket stays while it holds objects
#
# This launches real GPU capacity and costs money while it runs.

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

variable "zone" {
  description = "Zone of the nodes."
  type        = string
  default     = "us-central1-a"
}

variable "machine_type" {
  description = "Machine type of the nodes."
  type        = string
  default     = "g2-standard-8"
}

variable "node_count" {
  description = "Number of nodes."
  type        = number
  default     = 2
}

variable "spot" {
  description = "Run the nodes as Spot VMs."
  type        = bool
  default     = false
}

variable "ssh_public_key_path" {
  description = "Path of the OpenSSH public key that logs in as ubuntu."
  type        = string
}

variable "allowed_cidrs" {
  description = "IPv4 ranges allowed to reach SSH."
  type        = list(string)
}

variable "bucket_name" {
  description = "Globally unique name of the checkpoint bucket."
  type        = string
}

locals {
  region = join("-", slice(split("-", var.zone), 0, 2))
  labels = { "managed-by" = "rlinfra", "rlinfra-cluster" = "example", "rlinfra-profile" = "example" }
}

provider "google" {
  project = var.project
  region  = local.region
  zone    = var.zone

  default_labels = local.labels
}

module "network" {
  source = "../../../gcp_network"

  name                 = "example"
  region               = local.region
  allowed_cidrs        = var.allowed_cidrs
  node_service_account = module.cluster.service_account.email
}

module "bucket" {
  source = "../../../gcp_bucket"

  name     = var.bucket_name
  location = local.region
  labels   = local.labels
}

module "cluster" {
  source = "../.."

  cluster_name   = "example"
  node_count     = var.node_count
  machine_type   = var.machine_type
  zone           = var.zone
  subnetwork     = module.network.network.subnetwork
  spot           = var.spot
  ssh_public_key = file(var.ssh_public_key_path)
  bucket_name    = module.bucket.bucket.name
  labels         = local.labels
}

output "inventory" {
  description = "Hosts, head first."
  value       = module.cluster.inventory
}
