output "inventory" {
  description = "Hosts of the cluster, head first, as rlinfra's driver reads them."
  value       = module.cluster.inventory
}
