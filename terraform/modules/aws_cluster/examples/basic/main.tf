# Two GPU nodes in a new VPC, reachable over SSH from one address, with a checkpoint bucket grant:
#
#   ssh-keygen -t ed25519 -N '' -f ./id_ed25519
#   terraform init
#   terraform apply -var ssh_public_key_path=./id_ed25519.pub -var 'allowed_cidrs=["203.0.113.7/32"]'
#   ssh -i ./id_ed25519 ubuntu@$(terraform output -json inventory | jq -r '.nodes[0].ssh_host')
#   terraform destroy -var ssh_public_key_path=./id_ed25519.pub -var 'allowed_cidrs=["203.0.113.7/32"]'
#
# This launches real GPU capacity and costs money while it runs.

terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "region" {
  description = "AWS region of the example."
  type        = string
  default     = "us-east-1"
}

variable "availability_zone" {
  description = "Availability zone of the nodes."
  type        = string
  default     = "us-east-1a"
}

variable "instance_type" {
  description = "Instance type of the nodes."
  type        = string
  default     = "g6.xlarge"
}

variable "node_count" {
  description = "Number of nodes."
  type        = number
  default     = 2
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
  description = "Bucket the nodes may use (null: none)."
  type        = string
  default     = null
}

locals {
  tags = { "managed-by" = "rlinfra", "rlinfra:cluster" = "example", "rlinfra:profile" = "example" }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = local.tags
  }
}

module "network" {
  source = "../../../aws_network"

  name              = "example"
  availability_zone = var.availability_zone
  tags              = local.tags
}

module "cluster" {
  source = "../.."

  cluster_name   = "example"
  node_count     = var.node_count
  instance_type  = var.instance_type
  vpc_id         = module.network.network.vpc_id
  subnet_id      = module.network.network.subnet_id
  allowed_cidrs  = var.allowed_cidrs
  ssh_public_key = file(var.ssh_public_key_path)
  bucket_name    = var.bucket_name
  tags           = local.tags
}

output "inventory" {
  description = "Hosts, head first."
  value       = module.cluster.inventory
}
