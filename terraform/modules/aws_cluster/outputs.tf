output "inventory" {
  description = "Hosts for the driver's Ansible inventory, head first (rank order). ssh_host is the public address, or the private one when the node has none; interface \"\" means detect on the host."
  value = {
    cluster_name = var.cluster_name
    ssh_user     = "ubuntu"
    nodes = [
      for rank, node in aws_instance.this : {
        name          = "${var.cluster_name}-${rank}"
        rank          = rank
        ssh_host      = coalesce(try(aws_eip.efa[rank].public_ip, ""), node.public_ip, node.private_ip)
        private_ip    = node.private_ip
        interface     = ""
        instance_id   = node.id
        instance_type = node.instance_type
      }
    ]
  }
}

output "security_group_id" {
  description = "Id of the cluster's security group."
  value       = aws_security_group.this.id
}

output "placement_group" {
  description = "Name of the cluster placement group, or null when none was made (one node, or placement_group = false)."
  value       = local.make_placement_group ? aws_placement_group.this[0].name : null
}

output "iam_role" {
  description = "The nodes' IAM role and instance profile."
  value = {
    name             = aws_iam_role.this.name
    arn              = aws_iam_role.this.arn
    instance_profile = aws_iam_instance_profile.this.name
  }
}

output "key_pair" {
  description = "Name of the deployment's key pair."
  value       = aws_key_pair.this.key_name
}
