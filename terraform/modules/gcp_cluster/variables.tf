variable "cluster_name" {
  description = "Name of the cluster. Nodes are named \"<cluster_name>-<rank>\"; the placement policy is \"<cluster_name>-compact\"; the service account is \"<first 23 characters>-nodes\"."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$", var.cluster_name))
    error_message = "cluster_name must match ^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens, not ending with a hyphen (Compute Engine names)."
  }
}

variable "project" {
  description = "Project of everything made. null takes the provider's project."
  type        = string
  default     = null

  validation {
    condition     = var.project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be null or a project id: 6 to 30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "zone" {
  description = "Zone of every node, e.g. \"us-central1-a\" (the zone the machine type was checked in). The placement policy is made in its region."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]{1,2}-[a-z][a-z0-9]*$", var.zone))
    error_message = "zone must be a Compute Engine zone such as \"us-central1-a\" or \"europe-west4-b\"."
  }
}

variable "node_count" {
  description = "Number of instances, head first (rank 0)."
  type        = number
  default     = 1

  validation {
    condition     = floor(var.node_count) == var.node_count && var.node_count >= 1 && var.node_count <= 64
    error_message = "node_count must be a whole number from 1 to 64."
  }
}

variable "machine_type" {
  description = "Machine type of every node, e.g. \"a3-highgpu-8g\" (rlinfra picks it from its catalog). A2, A3, A4 and G2 types have their GPUs built in; N1 types take GPUs through guest_accelerator."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9]*-[a-z0-9-]+$", var.machine_type))
    error_message = "machine_type must be a Compute Engine machine type such as \"a3-highgpu-8g\", \"g2-standard-8\" or \"n1-standard-8\" (series-shape)."
  }
}

variable "guest_accelerator" {
  description = "GPUs attached to an N1 machine type (the only series here that takes them separately), e.g. { type = \"nvidia-tesla-t4\", count = 1 }. null attaches none; machine types with built-in GPUs (A2, A3, A4, G2) must leave it null."
  type = object({
    type  = string
    count = number
  })
  default = null

  validation {
    condition     = var.guest_accelerator == null || try(contains(["nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"], var.guest_accelerator.type), false)
    error_message = "guest_accelerator.type must be one of: nvidia-tesla-t4, nvidia-tesla-v100, nvidia-tesla-p100, nvidia-tesla-p4."
  }

  validation {
    condition     = var.guest_accelerator == null || try(contains([1, 2, 4, 8], var.guest_accelerator.count), false)
    error_message = "guest_accelerator.count must be one of: 1, 2, 4, 8."
  }

  validation {
    condition     = var.guest_accelerator == null || startswith(var.machine_type, "n1-")
    error_message = "guest_accelerator can only be set with an N1 machine type (n1-*); A2, A3, A4 and G2 types have their GPUs built in."
  }
}

variable "image" {
  description = "Boot image (a self link, a family path such as \"projects/P/global/images/family/F\", or a name). null takes Canonical's Ubuntu 22.04 accelerator image with the NVIDIA 570 driver for GPU nodes, Ubuntu 22.04 LTS for others. The image must support gVNIC and Shielded VM (UEFI)."
  type        = string
  default     = null

  validation {
    condition     = var.image == null || can(regex("^[A-Za-z0-9][A-Za-z0-9/_.:-]*$", var.image))
    error_message = "image must be null or an image self link, family path or name (letters, digits, / _ . : -)."
  }
}

variable "boot_disk" {
  description = "Boot disk of every node: size in GB and type. type null takes hyperdisk-balanced for machine series that support only Hyperdisk (A3 Ultra, A4), pd-balanced otherwise."
  type = object({
    size_gb = optional(number, 200)
    type    = optional(string)
  })
  default = {}

  validation {
    condition     = floor(var.boot_disk.size_gb) == var.boot_disk.size_gb && var.boot_disk.size_gb >= 50 && var.boot_disk.size_gb <= 65536
    error_message = "boot_disk.size_gb must be a whole number of GB from 50 to 65536 (the GPU images need about 50 GB)."
  }

  validation {
    condition     = var.boot_disk.type == null || contains(["pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced"], coalesce(var.boot_disk.type, "pd-balanced"))
    error_message = "boot_disk.type must be null or one of: pd-balanced, pd-ssd, pd-standard, hyperdisk-balanced."
  }
}

variable "subnetwork" {
  description = "Subnetwork of every node (gcp_network's network.subnetwork): a self link or \"projects/P/regions/R/subnetworks/S\"."
  type        = string

  validation {
    condition     = can(regex("^(https://www\\.googleapis\\.com/compute/v1/)?projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/regions/[a-z]+-[a-z]+[0-9]{1,2}/subnetworks/[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", var.subnetwork))
    error_message = "subnetwork must be a subnetwork self link or \"projects/PROJECT/regions/REGION/subnetworks/NAME\"."
  }
}

variable "network_tags" {
  description = "Network tags of every node; include gcp_network's network.node_tag when its firewall rules select nodes by tag."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for tag in var.network_tags : can(regex("^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", tag))])
    error_message = "network_tags must hold tags of 1 to 63 lowercase letters, digits or hyphens, starting with a letter and not ending with a hyphen."
  }
}

variable "public_ip" {
  description = "Give each node an ephemeral public IPv4 address for SSH from the controller. false keeps nodes private: the controller must reach the subnetwork, and the nodes reach only Google APIs (no Cloud NAT is made)."
  type        = bool
  default     = true
}

variable "ssh_user" {
  description = "User that the deployment's key logs in as (made by the guest environment from the ssh-keys metadata)."
  type        = string
  default     = "ubuntu"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user)) && var.ssh_user != "root"
    error_message = "ssh_user must be a Linux user name (lowercase letters, digits, _ and -, at most 32 characters), not root."
  }
}

variable "ssh_public_key" {
  description = "One OpenSSH public key (\"ssh-ed25519 AAAA... comment\"), put in the nodes' ssh-keys metadata for ssh_user. Project-wide keys are blocked on the nodes."
  type        = string

  validation {
    condition     = can(regex("^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\\n]*)?$", trimspace(var.ssh_public_key)))
    error_message = "ssh_public_key must be a single OpenSSH public key line of type ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256/384/521."
  }
}

variable "placement_policy" {
  description = "Put the nodes in one compact placement policy (COLLOCATED, made only when node_count > 1). Nodes under it use the TERMINATE host maintenance policy."
  type        = bool
  default     = true
}

variable "spot" {
  description = "Run the nodes as Spot VMs (provisioning_model SPOT): cheaper, preempted at Compute Engine's will, never restarted automatically."
  type        = bool
  default     = false
}

variable "spot_termination_action" {
  description = "What Compute Engine does to a preempted Spot VM: \"DELETE\" (the instance and its boot disk go away; the next terraform apply makes it again, and nothing is billed meanwhile) or \"STOP\" (the instance and disk stay, stopped; the disk is billed until someone starts or deletes it)."
  type        = string
  default     = "DELETE"

  validation {
    condition     = contains(["DELETE", "STOP"], var.spot_termination_action)
    error_message = "spot_termination_action must be one of: DELETE, STOP."
  }
}

variable "reservation_name" {
  description = "Consume capacity from this specific reservation (same project and zone), e.g. one made for A3 Mega or A3 Ultra capacity. null consumes any matching reservation, else on-demand (or Spot) capacity."
  type        = string
  default     = null

  validation {
    condition     = var.reservation_name == null || can(regex("^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", var.reservation_name))
    error_message = "reservation_name must be null or a reservation name (lowercase letters, digits and hyphens, starting with a letter)."
  }

  validation {
    condition     = var.reservation_name == null || !var.spot
    error_message = "reservation_name cannot be combined with spot = true: Spot VMs do not consume reservations."
  }
}

variable "secure_boot" {
  description = "Turn on Shielded VM secure boot. The default images load signed NVIDIA modules; images whose driver is built by DKMS need it off. vTPM and integrity monitoring are always on."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket whose objects the nodes' service account may read, write and delete (roles/storage.objectAdmin on that bucket only; the grant lives and dies with the cluster). null grants no bucket."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be null or a Cloud Storage bucket name: 3 to 63 lowercase letters, digits, dots, hyphens and underscores, starting and ending with a letter or digit."
  }
}

variable "labels" {
  description = "Labels of every node and boot disk (merged with rlinfra-rank per node); rlinfra passes rlinfra-cluster, rlinfra-profile and managed-by. Keys and values: lowercase letters, digits, _ and -."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for key, value in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
    ])
    error_message = "labels must have keys of 1 to 63 lowercase letters, digits, _ or - starting with a letter, and values of up to 63 of the same characters (no ':' or '.')."
  }
}
