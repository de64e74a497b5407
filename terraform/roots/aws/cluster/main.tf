locals {
  # Set only against an emulator; against AWS every one of these stays at the provider's default.
  emulated = length(var.endpoints) > 0

  tags = merge(var.tags, {
    "rlinfra:cluster" = var.cluster_name
    "managed-by"      = "rlinfra"
  })
}

provider "aws" {
  region      = var.region
  max_retries = var.max_retries

  s3_use_path_style           = local.emulated ? true : null
  skip_credentials_validation = local.emulated ? true : null
  skip_metadata_api_check     = local.emulated ? true : null
  skip_requesting_account_id  = local.emulated ? true : null

  dynamic "endpoints" {
    for_each = local.emulated ? [var.endpoints] : []
    content {
      ec2 = lookup(endpoints.value, "ec2", null)
      s3  = lookup(endpoints.value, "s3", null)
      sts = lookup(endpoints.value, "sts", null)
      iam = lookup(endpoints.value, "iam", null)
    }
  }

  default_tags {
    tags = local.tags
  }
}

module "network" {
  source = "./modules/aws_network"

  name               = var.cluster_name
  availability_zone  = var.availability_zone
  existing_subnet_id = var.existing_subnet_id
  vpc_cidr           = var.vpc_cidr
  subnet_cidr        = var.subnet_cidr
  tags               = local.tags
}

module "cluster" {
  source = "./modules/aws_cluster"

  cluster_name        = var.cluster_name
  node_count          = var.node_count
  instance_type       = var.instance_type
  ami                 = var.ami
  vpc_id              = module.network.network.vpc_id
  subnet_id           = module.network.network.subnet_id
  public_ip           = var.public_ip
  allowed_cidrs       = var.allowed_cidrs
  allow_public        = var.allow_public
  service_ports       = var.service_ports
  service_clients     = var.service_clients
  ssh_public_key      = var.ssh_public_key
  placement_group     = var.placement_group
  efa                 = var.efa
  spot                = var.spot
  spot_max_price      = var.spot_max_price
  root_volume         = var.root_volume
  bucket_name         = var.bucket_name
  detailed_monitoring = var.detailed_monitoring
  tags                = local.tags
}
