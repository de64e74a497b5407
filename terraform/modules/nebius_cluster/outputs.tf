output "inventory" {
  description = "Hosts for the driver's Ansible inventory, head first (rank order), shaped like the other clouds' cluster modules'. ssh_host is the public address, or the private one when the node has none; interface \"\" means detect on the host."
  value = {
    cluster_name = var.cluster_name
    ssh_user     = var.ssh_user
    nodes = [
      for rank, node in nebius_compute_v1_instance.this : {
        name = node.name
        rank = rank
        # Nebius reports addresses with their prefix length ("10.0.0.5/32").
        ssh_host      = coalesce(try(split("/", node.status.network_interfaces[0].public_ip_address.address)[0], ""), split("/", node.status.network_interfaces[0].ip_address.address)[0])
        private_ip    = split("/", node.status.network_interfaces[0].ip_address.address)[0]
        public_ip     = try(split("/", node.status.network_interfaces[0].public_ip_address.address)[0], null)
        interface     = ""
        instance_id   = node.id
        instance_type = "${node.resources.platform}:${node.resources.preset}"
        gpus          = local.gpus_per_node
        region        = var.region
      }
    ]
  }
}

output "gpu_cluster" {
  description = "The GPU cluster (InfiniBand) the nodes joined: id and fabric, or null when infiniband_fabric is null."
  value = local.make_gpu_cluster ? {
    id                = nebius_compute_v1_gpu_cluster.this[0].id
    infiniband_fabric = nebius_compute_v1_gpu_cluster.this[0].infiniband_fabric
  } : null
}

output "storage" {
  description = "What the nodes use for checkpoints: the bucket name (or null), the region's S3-compatible endpoint and the region. No access key is made by Terraform."
  value       = local.storage
}

output "scheduling" {
  description = "How every node is scheduled: preemptible (spot) or not, and the action on preemption (STOP, or null for regular VMs)."
  value = {
    preemptible   = var.spot
    on_preemption = var.spot ? "STOP" : null
  }
}
