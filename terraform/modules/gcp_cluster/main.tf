# GPU (or CPU) nodes for one Ray cluster on Compute Engine: a service account that reaches one
# bucket, a compact placement policy, and node_count instances with gVNIC, the deployment's SSH
# key in their metadata, and the scheduling a GPU or Spot VM needs. The firewall rules are
# gcp_network's.
#
# The decisions (image, disk type, scheduling, names) are locals that read variables only, so
# that they can be evaluated without the provider (tests/terraform/test_gcp_modules.py does).

locals {
  # Machine series whose GPUs are built into the machine type (model and count fixed by it).
  # Keep in step with driver/rlinfra/clouds/gcp/catalog.yaml.
  builtin_gpu_series = ["a2", "a3", "a4", "g2"]
  series             = split("-", var.machine_type)[0]
  gpu                = contains(local.builtin_gpu_series, local.series) || var.guest_accelerator != null

  # GPU nodes boot Canonical's accelerator image (NVIDIA driver 570 preinstalled), others plain
  # Ubuntu 22.04. Both are family paths: a node is created from the family's newest image.
  images = {
    gpu = "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2204-amd64-with-nvidia-570"
    cpu = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
  }
  image = var.image != null ? var.image : local.images[local.gpu ? "gpu" : "cpu"]

  # A3 Ultra and A4 boot from Hyperdisk only; the other series here take Persistent Disk.
  hyperdisk_only = can(regex("^(a3-ultragpu|a4-)", var.machine_type))
  boot_disk_type = coalesce(var.boot_disk.type, local.hyperdisk_only ? "hyperdisk-balanced" : "pd-balanced")

  # "us-central1-a" -> "us-central1": the placement policy is regional.
  region = join("-", slice(split("-", var.zone), 0, 2))

  make_placement_policy = var.placement_policy && var.node_count > 1

  # GPU VMs cannot live-migrate; Spot VMs and VMs in a compact placement policy must terminate on
  # host maintenance too. Spot VMs are never restarted by Compute Engine.
  scheduling = {
    provisioning_model          = var.spot ? "SPOT" : "STANDARD"
    preemptible                 = var.spot
    automatic_restart           = !var.spot
    on_host_maintenance         = local.gpu || var.spot || local.make_placement_policy ? "TERMINATE" : "MIGRATE"
    instance_termination_action = var.spot ? var.spot_termination_action : null
  }

  # Service account ids are 6 to 30 characters: the cluster name's first 23 (no trailing hyphen)
  # and "-nodes".
  account_id = "${replace(substr(var.cluster_name, 0, 23), "/-+$/", "")}-nodes"

  # The deployment's key, in the form the guest environment reads from ssh-keys metadata.
  ssh_keys = "${var.ssh_user}:${trimspace(var.ssh_public_key)}"
}

# --- identity: the nodes reach the checkpoint bucket and nothing else ------------------------------

resource "google_service_account" "this" {
  project      = var.project
  account_id   = local.account_id
  display_name = "rlinfra ${var.cluster_name} nodes"
  description  = "Nodes of rlinfra cluster ${var.cluster_name} (managed by rlinfra); no project roles, object access to its checkpoint bucket only."
}

resource "google_storage_bucket_iam_member" "checkpoints" {
  count = var.bucket_name == null ? 0 : 1

  bucket = var.bucket_name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.this.email}"
}

# --- placement ------------------------------------------------------------------------------------

resource "google_compute_resource_policy" "placement" {
  count = local.make_placement_policy ? 1 : 0

  project     = var.project
  name        = "${var.cluster_name}-compact"
  description = "rlinfra cluster ${var.cluster_name}: nodes close together"
  region      = local.region

  group_placement_policy {
    collocation = "COLLOCATED"
  }
}

# --- nodes ----------------------------------------------------------------------------------------

resource "google_compute_instance" "this" {
  count = var.node_count

  #checkov:skip=CKV_GCP_40:The controller reaches each node over SSH at its public address (public_ip = true); inbound is limited to SSH and service ports from allowed_cidrs by gcp_network's firewall rules.
  #checkov:skip=CKV_GCP_38:Boot disks are encrypted at rest with Google-managed keys; customer-supplied keys would have to be handed to Terraform in the clear, and the disks hold nothing that outlives the node (checkpoints go to the bucket).
  #checkov:skip=CKV_GCP_34:The deployment logs in with its own key from ssh-keys metadata, which OS Login would ignore; block-project-ssh-keys keeps every other key out.
  project      = var.project
  zone         = var.zone
  name         = "${var.cluster_name}-${count.index}"
  description  = "rlinfra cluster ${var.cluster_name}, rank ${count.index}"
  machine_type = var.machine_type

  tags   = var.network_tags
  labels = merge(var.labels, { "rlinfra-rank" = tostring(count.index) })

  metadata = {
    ssh-keys = local.ssh_keys
    # Only the deployment's key logs in: keys in project metadata are ignored on these nodes.
    block-project-ssh-keys = "true"
    # The key above is honoured only without OS Login (which would ignore ssh-keys metadata).
    enable-oslogin = "FALSE"
  }

  resource_policies = local.make_placement_policy ? [google_compute_resource_policy.placement[0].self_link] : null

  boot_disk {
    auto_delete = true

    initialize_params {
      image  = local.image
      size   = var.boot_disk.size_gb
      type   = local.boot_disk_type
      labels = var.labels
    }
  }

  network_interface {
    subnetwork = var.subnetwork
    nic_type   = "GVNIC"
    stack_type = "IPV4_ONLY"

    dynamic "access_config" {
      for_each = var.public_ip ? [1] : []
      content {
        network_tier = "PREMIUM"
      }
    }
  }

  dynamic "guest_accelerator" {
    for_each = var.guest_accelerator == null ? [] : [var.guest_accelerator]
    content {
      type  = guest_accelerator.value.type
      count = guest_accelerator.value.count
    }
  }

  scheduling {
    provisioning_model          = local.scheduling.provisioning_model
    preemptible                 = local.scheduling.preemptible
    automatic_restart           = local.scheduling.automatic_restart
    on_host_maintenance         = local.scheduling.on_host_maintenance
    instance_termination_action = local.scheduling.instance_termination_action
  }

  dynamic "reservation_affinity" {
    for_each = var.reservation_name == null ? [] : [var.reservation_name]
    content {
      type = "SPECIFIC_RESERVATION"
      specific_reservation {
        key    = "compute.googleapis.com/reservation-name"
        values = [reservation_affinity.value]
      }
    }
  }

  service_account {
    email = google_service_account.this.email
    # Access is governed by the account's IAM grants (one bucket), not by OAuth scopes.
    scopes = ["cloud-platform"]
  }

  shielded_instance_config {
    enable_secure_boot          = var.secure_boot
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  can_ip_forward      = false
  deletion_protection = false

  lifecycle {
    # A newer image in the family must not replace running nodes; `terraform apply -replace`
    # (or a new deployment) moves a cluster to it.
    ignore_changes = [boot_disk[0].initialize_params[0].image]
  }
}
