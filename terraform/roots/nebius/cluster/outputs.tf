output "inventory" {
  description = "Hosts of the cluster, head first, as rlinfra's driver reads them (ssh_user; per node name, rank, ssh_host, private_ip, interface)."
  value       = module.cluster.inventory
}

output "network" {
  description = "Network, subnet and security group ids of the cluster."
  value       = module.network.network
}

output "security_rules" {
  description = "Names of the cluster's security rules."
  value       = module.network.security_rules
}

output "gpu_cluster" {
  description = "The GPU cluster (id, InfiniBand fabric) the nodes joined, or null."
  value       = module.cluster.gpu_cluster
}

output "storage" {
  description = "The checkpoint bucket's name, the region's S3-compatible endpoint and the region (no access keys: the driver sends those over SSH)."
  value       = module.cluster.storage
}

output "scheduling" {
  description = "Whether the nodes are preemptible, and what happens to them when preempted."
  value       = module.cluster.scheduling
}
