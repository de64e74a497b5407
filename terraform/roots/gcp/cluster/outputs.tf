output "inventory" {
  description = "Hosts of the cluster, head first, as rlinfra's driver reads them."
  value       = module.cluster.inventory
}

output "network" {
  description = "Network and subnetwork (self links), region and node tag of the cluster."
  value       = module.network.network
}

output "firewall_rules" {
  description = "Names of the cluster's firewall rules."
  value       = module.network.firewall_rules
}

output "service_account" {
  description = "The nodes' service account (email, name)."
  value       = module.cluster.service_account
}

output "placement_policy" {
  description = "Self link of the compact placement policy, or null."
  value       = module.cluster.placement_policy
}

output "scheduling" {
  description = "The scheduling every node got (provisioning model, maintenance policy)."
  value       = module.cluster.scheduling
}
