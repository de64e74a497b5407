output "inventory" {
  description = "Hosts for the driver's Ansible inventory, head first (rank order), shaped like aws_cluster's. ssh_host is the public address, or the private one when the node has none; interface \"\" means detect on the host."
  value = {
    cluster_name = var.cluster_name
    ssh_user     = var.ssh_user
    nodes = [
      for rank, node in google_compute_instance.this : {
        name          = node.name
        rank          = rank
        ssh_host      = coalesce(try(node.network_interface[0].access_config[0].nat_ip, ""), node.network_interface[0].network_ip)
        private_ip    = node.network_interface[0].network_ip
        public_ip     = try(node.network_interface[0].access_config[0].nat_ip, null)
        interface     = ""
        instance_id   = node.instance_id
        instance_type = node.machine_type
        zone          = node.zone
      }
    ]
  }
}

output "service_account" {
  description = "The nodes' service account: email (for gcp_network's node_service_account and gcp_bucket's object_admins) and its full name."
  value = {
    email = google_service_account.this.email
    name  = google_service_account.this.name
  }
}

output "placement_policy" {
  description = "Self link of the compact placement policy, or null when none was made (one node, or placement_policy = false)."
  value       = local.make_placement_policy ? google_compute_resource_policy.placement[0].self_link : null
}

output "scheduling" {
  description = "The scheduling every node got: provisioning_model, preemptible, automatic_restart, on_host_maintenance and instance_termination_action (null unless Spot)."
  value       = local.scheduling
}
