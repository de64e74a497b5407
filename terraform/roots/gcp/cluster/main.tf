locals {
  labels = merge(var.labels, {
    "rlinfra-cluster" = var.cluster_name
    "managed-by"      = "rlinfra"
  })
}

# Credentials are Application Default Credentials (gcloud, GOOGLE_APPLICATION_CREDENTIALS or the
# VM's service account), never variables.
provider "google" {
  project = var.project
  region  = var.region
  zone    = var.zone

  default_labels = local.labels
}

module "network" {
  source = "./modules/gcp_network"

  name                = var.cluster_name
  project             = var.project
  region              = var.region
  existing_subnetwork = var.existing_subnetwork
  subnet_cidr         = var.subnet_cidr
  # Cluster members are the nodes' service account: only principals that may act as it can join.
  node_service_account = module.cluster.service_account.email
  allowed_cidrs        = var.allowed_cidrs
  allow_public         = var.allow_public
  service_ports        = var.service_ports
  service_clients      = var.service_clients
}

module "cluster" {
  source = "./modules/gcp_cluster"

  cluster_name      = var.cluster_name
  project           = var.project
  zone              = var.zone
  node_count        = var.node_count
  machine_type      = var.machine_type
  guest_accelerator = var.guest_accelerator
  image             = var.image
  boot_disk         = var.boot_disk
  subnetwork        = module.network.network.subnetwork
  public_ip         = var.public_ip
  ssh_public_key    = var.ssh_public_key
  placement_policy  = var.placement_policy
  spot              = var.spot
  bucket_name       = var.bucket_name
  labels            = local.labels
}
