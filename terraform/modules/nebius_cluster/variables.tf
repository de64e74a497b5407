variable "cluster_name" {
  description = "Name of the cluster. Nodes are named (and their hostnames set to) \"<cluster_name>-<rank>\", their boot disks \"<cluster_name>-<rank>-boot\"; the GPU cluster is \"<cluster_name>\"."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$", var.cluster_name))
    error_message = "cluster_name must match ^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens, not ending with a hyphen."
  }
}

variable "parent_id" {
  description = "Nebius project id (\"project-...\") of everything made; the project belongs to one region."
  type        = string

  validation {
    condition     = can(regex("^project-[a-z0-9]+$", var.parent_id))
    error_message = "parent_id must be a Nebius project id such as \"project-e00abc123def456\"."
  }
}

variable "region" {
  description = "Region of the project, e.g. \"eu-north1\": names the Object Storage endpoint the nodes use (https://storage.<region>.nebius.cloud)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}-[a-z]+[0-9]$", var.region))
    error_message = "region must be a Nebius region such as \"eu-north1\", \"eu-west1\" or \"us-central1\"."
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

variable "platform" {
  description = "Compute platform of every node: a GPU platform such as \"gpu-h100-sxm\" or \"gpu-h200-sxm\", or a CPU platform such as \"cpu-d3\" for CPU-only nodes."
  type        = string

  validation {
    condition     = can(regex("^(gpu|cpu)-[a-z0-9]+(-[a-z0-9]+)*$", var.platform))
    error_message = "platform must be a Nebius platform such as \"gpu-h100-sxm\", \"gpu-l40s-a\" or \"cpu-d3\" (gpu-* or cpu-*)."
  }
}

variable "preset" {
  description = "Preset of the platform (the VM's size): \"<N>gpu-<V>vcpu-<M>gb\" on GPU platforms, e.g. \"1gpu-16vcpu-200gb\" or \"8gpu-128vcpu-1600gb\"; \"<V>vcpu-<M>gb\" on CPU platforms, e.g. \"8vcpu-32gb\"."
  type        = string

  validation {
    condition     = can(regex("^([1-9][0-9]*gpu-)?[1-9][0-9]*vcpu-[1-9][0-9]*gb$", var.preset))
    error_message = "preset must look like \"8gpu-128vcpu-1600gb\" (GPU platforms) or \"8vcpu-32gb\" (CPU platforms)."
  }

  validation {
    condition     = startswith(var.platform, "gpu-") == can(regex("^[0-9]+gpu-", var.preset))
    error_message = "preset must name GPUs (\"<N>gpu-...\") on a GPU platform (gpu-*) and none on a CPU platform (cpu-*)."
  }
}

variable "infiniband_fabric" {
  description = "InfiniBand fabric of a GPU cluster that every node joins (e.g. \"fabric-3\"; which fabrics a region has is Nebius's list). Only with an 8-GPU preset; null makes no GPU cluster, and traffic between nodes uses the Ethernet interface."
  type        = string
  default     = null

  validation {
    condition     = var.infiniband_fabric == null || can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", var.infiniband_fabric))
    error_message = "infiniband_fabric must be null or a fabric name such as \"fabric-3\" (lowercase letters, digits and hyphens)."
  }

  validation {
    condition     = var.infiniband_fabric == null || startswith(var.preset, "8gpu-")
    error_message = "infiniband_fabric needs an 8-GPU preset (\"8gpu-...\"): Nebius joins only whole 8-GPU hosts over InfiniBand; leave it null for smaller presets and CPU platforms."
  }
}

variable "image_family" {
  description = "Image family of the boot disks; the family's newest image when a disk is made. The default, \"ubuntu22.04-cuda12\", has the NVIDIA driver and CUDA 12; Nebius reports that Fabric Manager fails to start on 8-GPU VMs with its Ubuntu 24.04 images."
  type        = string
  default     = "ubuntu22.04-cuda12"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]*$", var.image_family))
    error_message = "image_family must be an image family name such as \"ubuntu22.04-cuda12\" (lowercase letters, digits, ., _ and -)."
  }
}

variable "boot_disk_size_gb" {
  description = "Size of every boot disk (network SSD) in GiB."
  type        = number
  default     = 200

  validation {
    condition     = floor(var.boot_disk_size_gb) == var.boot_disk_size_gb && var.boot_disk_size_gb >= 50 && var.boot_disk_size_gb <= 65536
    error_message = "boot_disk_size_gb must be a whole number of GiB from 50 to 65536 (the CUDA images need about 50)."
  }
}

variable "subnet_id" {
  description = "Subnet of every node's interface (nebius_network's network.subnet_id)."
  type        = string

  validation {
    condition     = can(regex("^vpcsubnet-[a-z0-9]+$", var.subnet_id))
    error_message = "subnet_id must be a Nebius subnet id such as \"vpcsubnet-e00abc123def456\"."
  }
}

variable "security_group_id" {
  description = "Security group of every node's interface (nebius_network's network.security_group_id): its rules are the cluster's firewall."
  type        = string

  validation {
    condition     = can(regex("^vpcsecuritygroup-[a-z0-9]+$", var.security_group_id))
    error_message = "security_group_id must be a Nebius security group id such as \"vpcsecuritygroup-e00abc123def456\"."
  }
}

variable "public_ip" {
  description = "Give each node a public IPv4 address (released with the node) for SSH from the controller. Without one the controller must reach the private addresses of the subnet."
  type        = bool
  default     = true
}

variable "ssh_user" {
  description = "User that cloud-init makes with the deployment's key and passwordless sudo."
  type        = string
  default     = "ubuntu"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user)) && var.ssh_user != "root"
    error_message = "ssh_user must be a Linux user name (lowercase letters, digits, _ and -, at most 32 characters), not root."
  }
}

variable "ssh_public_key" {
  description = "One OpenSSH public key (\"ssh-ed25519 AAAA... comment\"), the only key that logs in as ssh_user."
  type        = string

  validation {
    condition     = can(regex("^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\\n]*)?$", trimspace(var.ssh_public_key)))
    error_message = "ssh_public_key must be a single OpenSSH public key line of type ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256/384/521."
  }
}

variable "spot" {
  description = "Run the nodes as preemptible VMs: cheaper, stopped (not deleted) when Nebius needs the capacity back; disks and the private address stay."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket (the storage root's) that the nodes use, reported in the storage output. Nothing is granted here: Object Storage takes S3 access keys, which the driver sends to the nodes over SSH. null: no bucket."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be null or an Object Storage bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit."
  }
}

variable "labels" {
  description = "Labels of every node, boot disk and the GPU cluster (merged with rlinfra-rank per node and disk); rlinfra passes rlinfra-cluster, rlinfra-profile and managed-by. Keys and values: lowercase letters, digits, _ and -."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for key, value in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
    ])
    error_message = "labels must have keys of 1 to 63 lowercase letters, digits, _ or - starting with a letter, and values of up to 63 of the same characters."
  }
}
