# --- provider -------------------------------------------------------------------------------------

variable "project" {
  description = "Google Cloud project of everything made. null takes the provider's (GOOGLE_PROJECT and the like); rlinfra's `up` always sets it. Credentials come from Application Default Credentials, never from variables."
  type        = string
  default     = null

  validation {
    condition     = var.project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be null or a project id: 6 to 30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the cluster's subnetwork, e.g. \"us-central1\" (the zone's region)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]{1,2}$", var.region))
    error_message = "region must be a Google Cloud region such as \"us-central1\" or \"europe-west4\"."
  }
}

variable "zone" {
  description = "Zone of every node, e.g. \"us-central1-a\" (the zone the machine type was checked in)."
  type        = string

  validation {
    condition     = startswith(var.zone, "${var.region}-")
    error_message = "zone must be a zone of region (such as \"us-central1-a\" for \"us-central1\")."
  }
}

variable "labels" {
  description = "Labels of every resource that takes labels, as provider default_labels and module labels (rlinfra-profile; rlinfra-cluster and managed-by = rlinfra are added)."
  type        = map(string)
  default     = {}
}

# --- network --------------------------------------------------------------------------------------

variable "existing_subnetwork" {
  description = "Put the cluster in this existing subnetwork (self link or \"projects/P/regions/R/subnetworks/S\") instead of a new network; only the firewall rules are made then."
  type        = string
  default     = null
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnetwork (/16 to /28)."
  type        = string
  default     = "10.42.0.0/24"
}

variable "allowed_cidrs" {
  description = "IPv4 ranges that may reach SSH and service_ports."
  type        = list(string)
  default     = []
}

variable "allow_public" {
  description = "Allow a /0 range (the whole internet) in allowed_cidrs and service_clients."
  type        = bool
  default     = false
}

variable "service_ports" {
  description = "TCP ports besides SSH that allowed_cidrs may reach."
  type        = list(number)
  default     = []
}

variable "service_clients" {
  description = "Other networks that may reach one service port each (port and CIDRs)."
  type = list(object({
    port  = number
    cidrs = list(string)
  }))
  default = []
}

# --- cluster --------------------------------------------------------------------------------------

variable "cluster_name" {
  description = "Name of the cluster; nodes are \"<cluster_name>-<rank>\"."
  type        = string
}

variable "node_count" {
  description = "Number of nodes; the first is the Ray head."
  type        = number
}

variable "machine_type" {
  description = "Machine type of every node, chosen from rlinfra's catalog (A2, A3 and G2 types have their GPUs built in)."
  type        = string
}

variable "guest_accelerator" {
  description = "GPUs attached to an N1 machine type ({ type, count }); null for every other series."
  type = object({
    type  = string
    count = number
  })
  default = null
}

variable "image" {
  description = "Boot image; null takes Canonical's Ubuntu 22.04 accelerator image (NVIDIA driver) for GPU nodes."
  type        = string
  default     = null
}

variable "boot_disk" {
  description = "Boot disk of every node: size in GB and type (null lets gcp_cluster pick pd-balanced, or hyperdisk-balanced where only Hyperdisk boots)."
  type = object({
    size_gb = optional(number, 200)
    type    = optional(string)
  })
  default = {}
}

variable "public_ip" {
  description = "Give each node an ephemeral public IPv4 address for SSH from the controller."
  type        = bool
  default     = true
}

variable "ssh_public_key" {
  description = "The deployment's OpenSSH public key, put in the nodes' ssh-keys metadata."
  type        = string
}

variable "placement_policy" {
  description = "Put the nodes in one compact placement policy when there is more than one."
  type        = bool
  default     = true
}

variable "spot" {
  description = "Run the nodes as Spot VMs (deleted when preempted; the next apply makes them again)."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket (made by the storage root) whose objects the nodes' service account may use; null grants none."
  type        = string
  default     = null
}
