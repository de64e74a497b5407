# GPU (or CPU) nodes for one Ray cluster on Nebius Compute: node_count instances, each booting from
# a network SSD made from an image family, with one interface in the cluster's subnet carrying the
# cluster's security group (nebius_network's), a public address unless public_ip = false, the
# deployment's SSH key for ssh_user through cloud-init, a GPU cluster (InfiniBand) when
# infiniband_fabric is set, and preemptible scheduling when spot = true.
#
# The decisions (GPU count, GPU cluster, cloud-init, names) are locals that read variables only, so
# that they can be evaluated without the provider (tests/terraform/test_nebius_modules.py does).

locals {
  gpu           = startswith(var.platform, "gpu-")
  gpus_per_node = local.gpu ? tonumber(regex("^([0-9]+)gpu-", var.preset)[0]) : 0

  # Instances joined over InfiniBand share one GPU cluster (8-GPU presets only: a validation).
  make_gpu_cluster = var.infiniband_fabric != null

  names = [for rank in range(var.node_count) : "${var.cluster_name}-${rank}"]

  # cloud-init makes ssh_user with the deployment's key (and passwordless sudo, which Ansible's
  # become needs); password logins over SSH are off and root cannot log in.
  cloud_init = join("\n", ["#cloud-config", yamlencode({
    users = [{
      name                = var.ssh_user
      shell               = "/bin/bash"
      sudo                = "ALL=(ALL) NOPASSWD:ALL"
      lock_passwd         = true
      ssh_authorized_keys = [trimspace(var.ssh_public_key)]
    }]
    ssh_pwauth   = false
    disable_root = true
  })])

  # Object Storage is S3-compatible at one endpoint per region. The nodes' access keys are not
  # made here: the driver sends them over SSH, so they never enter Terraform's state.
  storage = {
    bucket_name = var.bucket_name
    endpoint    = "https://storage.${var.region}.nebius.cloud"
    region      = var.region
  }
}

# --- InfiniBand -----------------------------------------------------------------------------------

resource "nebius_compute_v1_gpu_cluster" "this" {
  count = local.make_gpu_cluster ? 1 : 0

  parent_id         = var.parent_id
  name              = var.cluster_name
  infiniband_fabric = var.infiniband_fabric
  labels            = var.labels
}

# --- boot disks -----------------------------------------------------------------------------------

resource "nebius_compute_v1_disk" "boot" {
  count = var.node_count

  parent_id        = var.parent_id
  name             = "${local.names[count.index]}-boot"
  type             = "NETWORK_SSD"
  size_gibibytes   = var.boot_disk_size_gb
  block_size_bytes = 4096
  labels           = merge(var.labels, { "rlinfra-rank" = tostring(count.index) })

  # The family's newest image when the disk is made; a newer image later does not replace it.
  source_image_family = {
    image_family = var.image_family
  }
}

# --- nodes ----------------------------------------------------------------------------------------

resource "nebius_compute_v1_instance" "this" {
  count = var.node_count

  parent_id = var.parent_id
  name      = local.names[count.index]
  hostname  = local.names[count.index]
  labels    = merge(var.labels, { "rlinfra-rank" = tostring(count.index) })

  resources = {
    platform = var.platform
    preset   = var.preset
  }

  boot_disk = {
    attach_mode = "READ_WRITE"
    existing_disk = {
      id = nebius_compute_v1_disk.boot[count.index].id
    }
  }

  network_interfaces = [{
    name      = "eth0"
    subnet_id = var.subnet_id
    # A private address from the subnet's pools; a public one (released with the node) for SSH
    # from the controller unless public_ip = false.
    ip_address        = {}
    public_ip_address = var.public_ip ? {} : null
    security_groups   = [{ id = var.security_group_id }]
  }]

  gpu_cluster = local.make_gpu_cluster ? { id = nebius_compute_v1_gpu_cluster.this[0].id } : null

  # The only action Nebius takes on a preempted VM: it is stopped, disks and all.
  preemptible = var.spot ? { on_preemption = "STOP" } : null

  cloud_init_user_data = local.cloud_init

  lifecycle {
    # cloud-init runs once, at the first boot: a changed key or user must not replace a running
    # training node; `terraform apply -replace` (or a new deployment) applies it.
    ignore_changes = [cloud_init_user_data]
  }
}
