locals {
  labels = merge(var.labels, {
    "rlinfra-cluster" = var.cluster_name
    "managed-by"      = "rlinfra"
  })
}

# Credentials come from the environment, never from variables: NEBIUS_IAM_TOKEN (for example
# `export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)`; a token lasts 12 hours).
provider "nebius" {}

module "network" {
  source = "./modules/nebius_network"

  name               = var.cluster_name
  parent_id          = var.parent_id
  existing_subnet_id = var.existing_subnet_id
  subnet_cidr        = var.subnet_cidr
  allowed_cidrs      = var.allowed_cidrs
  allow_public       = var.allow_public
  service_ports      = var.service_ports
  service_clients    = var.service_clients
  labels             = local.labels
}

module "cluster" {
  source = "./modules/nebius_cluster"

  cluster_name      = var.cluster_name
  parent_id         = var.parent_id
  region            = var.region
  node_count        = var.node_count
  platform          = var.platform
  preset            = var.preset
  infiniband_fabric = var.infiniband_fabric
  image_family      = var.image_family
  boot_disk_size_gb = var.boot_disk_size_gb
  subnet_id         = module.network.network.subnet_id
  security_group_id = module.network.network.security_group_id
  public_ip         = var.public_ip
  ssh_user          = var.ssh_user
  ssh_public_key    = var.ssh_public_key
  spot              = var.spot
  bucket_name       = var.bucket_name
  labels            = local.labels
}
