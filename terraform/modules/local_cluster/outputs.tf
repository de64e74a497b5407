output "inventory" {
  description = "Hosts for the driver's Ansible inventory, head first (rank order)."
  value = {
    cluster_name = var.cluster_name
    ssh_user     = "root"
    nodes = [
      for node in terraform_data.node[*].output : {
        name       = node.name
        rank       = node.rank
        ssh_host   = node.ip
        private_ip = node.ip
        interface  = "eth0"
        netns      = node.netns
      }
    ]
  }
}

output "network" {
  description = "The cluster bridge and its subnet, for leak checks and cleanup."
  value = {
    bridge      = terraform_data.bridge.output.bridge
    gateway     = terraform_data.bridge.output.gateway
    subnet_cidr = terraform_data.bridge.output.subnet_cidr
    link_prefix = "rlv${local.id}"
    netns       = [for node in terraform_data.node[*].output : node.netns]
  }
}
