module "cluster" {
  source = "./modules/local_cluster"

  cluster_name       = var.cluster_name
  node_count         = var.node_count
  subnet_cidr        = var.subnet_cidr
  state_dir          = var.state_dir
  ssh_authorized_key = var.ssh_authorized_key
}
