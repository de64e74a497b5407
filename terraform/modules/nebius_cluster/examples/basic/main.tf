# Two one-GPU H100 nodes in a new network, reachable over SSH from one address, with a checkpoint
# bucket:
#
#   export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)
#   ssh-keygen -t ed25519 -N '' -f ./id_ed25519
#   terraform init
#   terraform apply -var parent_id=project-e00... -var region=eu-north1 \
#     -var bucket_name=my-checkpoints-1234 -var ssh_public_key_path=./id_ed25519.pub \
#     -var 'allowed_cidrs=["203.0.113.7/32"]'
#   ssh -i ./id_ed25519 ubuntu@$(terraform output -json inventory | jq -r '.nodes[0].ssh_host')
#   terraform destroy ...   # the same -var options; empty the bucket first
#
# The nodes reach the bucket with S3 access keys of your own (not made here). This launches real
# GPU capacity and costs money while it runs.

terraform {
  required_version = ">= 1.9"

  required_providers {
    nebius = {
      source  = "nebius/nebius"
      version = "~> 0.6.32"
    }
  }
}

variable "parent_id" {
  description = "Nebius project of the example."
  type        = string
}

variable "region" {
  description = "Region of the project."
  type        = string
  default     = "eu-north1"
}

variable "platform" {
  description = "Platform of the nodes."
  type        = string
  default     = "gpu-h100-sxm"
}

variable "preset" {
  description = "Preset of the nodes."
  type        = string
  default     = "1gpu-16vcpu-200gb"
}

variable "node_count" {
  description = "Number of nodes."
  type        = number
  default     = 2
}

variable "spot" {
  description = "Run the nodes as preemptible VMs."
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
  description = "Name of the checkpoint bucket."
  type        = string
}

locals {
  labels = { "managed-by" = "rlinfra", "rlinfra-cluster" = "example", "rlinfra-profile" = "example" }
}

provider "nebius" {}

module "network" {
  source = "../../../nebius_network"

  name          = "example"
  parent_id     = var.parent_id
  allowed_cidrs = var.allowed_cidrs
  labels        = local.labels
}

module "bucket" {
  source = "../../../nebius_bucket"

  name      = var.bucket_name
  parent_id = var.parent_id
  labels    = local.labels
}

module "cluster" {
  source = "../.."

  cluster_name      = "example"
  parent_id         = var.parent_id
  region            = var.region
  node_count        = var.node_count
  platform          = var.platform
  preset            = var.preset
  subnet_id         = module.network.network.subnet_id
  security_group_id = module.network.network.security_group_id
  spot              = var.spot
  ssh_public_key    = file(var.ssh_public_key_path)
  bucket_name       = module.bucket.bucket.name
  labels            = local.labels
}

output "inventory" {
  description = "Hosts, head first."
  value       = module.cluster.inventory
}
