# Two hosts on one machine (needs root, iproute2 and openssh-server):
#
#   ssh-keygen -t ed25519 -N '' -f ./id_ed25519
#   terraform init && terraform apply -var ssh_public_key_path=./id_ed25519.pub
#   ssh -i ./id_ed25519 root@10.213.250.10
#   terraform destroy -var ssh_public_key_path=./id_ed25519.pub

terraform {
  required_version = ">= 1.5"
}

variable "cluster_name" {
  description = "Name of the example cluster."
  type        = string
  default     = "example"
}

variable "node_count" {
  description = "Number of hosts."
  type        = number
  default     = 2
}

variable "subnet_cidr" {
  description = "IPv4 /24 for the cluster bridge."
  type        = string
  default     = "10.213.250.0/24"
}

variable "state_dir" {
  description = "Absolute folder for the node folders; null puts them in ./nodes next to this file."
  type        = string
  default     = null
}

variable "node_disk_size" {
  description = "Size limit of each host's /opt and /tmp (tmpfs); \"\" for plain folders on disk."
  type        = string
  default     = "4g"
}

variable "ssh_public_key_path" {
  description = "Path of the OpenSSH public key allowed to log in as root."
  type        = string
}

module "cluster" {
  source = "../.."

  cluster_name       = var.cluster_name
  node_count         = var.node_count
  subnet_cidr        = var.subnet_cidr
  state_dir          = coalesce(var.state_dir, abspath("${path.root}/nodes"))
  ssh_authorized_key = file(var.ssh_public_key_path)
  node_disk_size     = var.node_disk_size
}

output "inventory" {
  description = "Hosts, head first."
  value       = module.cluster.inventory
}

output "network" {
  description = "Bridge and subnet of the cluster."
  value       = module.cluster.network
}
