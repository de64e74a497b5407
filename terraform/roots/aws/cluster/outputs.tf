output "inventory" {
  description = "Hosts of the cluster, head first, as rlinfra's driver reads them."
  value       = module.cluster.inventory
}

output "network" {
  description = "VPC, subnet and availability zone of the cluster."
  value       = module.network.network
}

output "security_group_id" {
  description = "Id of the cluster's security group."
  value       = module.cluster.security_group_id
}

output "placement_group" {
  description = "Name of the cluster placement group, or null."
  value       = module.cluster.placement_group
}

output "iam_role" {
  description = "The nodes' IAM role (name, arn) and instance profile."
  value       = module.cluster.iam_role
}

output "key_pair" {
  description = "Name of the deployment's key pair."
  value       = module.cluster.key_pair
}
