# The contract of this root (what the driver writes into terraform.tfvars.json):
#
#   cluster_name       string        nodes are "<cluster_name>-<rank>"; names the network too
#   parent_id          string        the Nebius project id ("project-..."); its region is `region`
#   region             string        the project's region, e.g. "eu-north1" (the S3 endpoint's)
#   node_count         number        nodes, the first is the Ray head
#   platform           string        "gpu-h100-sxm", "gpu-h200-sxm", ... or "cpu-d3" (CPU only)
#   preset             string        "1gpu-16vcpu-200gb", "8gpu-128vcpu-1600gb", or "8vcpu-32gb"
#   infiniband_fabric  string|null   a GPU cluster on this fabric (8-GPU presets only); null: none
#   image_family       string        boot image family, default "ubuntu22.04-cuda12"
#   boot_disk_size_gb  number        boot disk (network SSD) in GiB, default 200
#   existing_subnet_id string|null   put the nodes in this subnet; null makes network + subnet
#   subnet_cidr        string|null   range of the new subnet; null uses the network's pools
#   public_ip          bool          a public IPv4 address per node, default true
#   ssh_user           string        the user cloud-init makes with the key, default "ubuntu"
#   ssh_public_key     string        the deployment's OpenSSH public key
#   allowed_cidrs      list(string)  ranges that reach SSH and service_ports
#   allow_public       bool          allow a /0 range in allowed_cidrs / service_clients
#   service_ports      list(number)  TCP ports besides SSH open to allowed_cidrs
#   service_clients    list(object({ port = number, cidrs = list(string) }))
#                                    one port each, open to its ranges only (default [])
#   spot               bool          preemptible VMs (stopped when preempted), default false
#   bucket_name        string|null   the checkpoint bucket (storage root's), reported in `storage`
#   labels             map(string)   labels of everything (rlinfra-cluster, managed-by added)
#
# Outputs: inventory (the cluster modules' contract: ssh_user; per node name, rank, ssh_host,
# private_ip, interface, and public_ip, instance_id, instance_type, gpus, region), network,
# security_rules, gpu_cluster, storage, scheduling.
#
# No variable holds a credential: the provider reads NEBIUS_IAM_TOKEN from the environment, and
# the nodes' S3 access keys for the bucket are sent by the driver over SSH, not through Terraform.

# --- project ---------------------------------------------------------------------------------------

variable "parent_id" {
  description = "Nebius project id (\"project-...\") of everything made. Credentials come from the environment (NEBIUS_IAM_TOKEN), never from variables."
  type        = string

  validation {
    condition     = can(regex("^project-[a-z0-9]+$", var.parent_id))
    error_message = "parent_id must be a Nebius project id such as \"project-e00abc123def456\"."
  }
}

variable "region" {
  description = "Region of the project, e.g. \"eu-north1\" (Nebius projects are regional); names the Object Storage endpoint."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}-[a-z]+[0-9]$", var.region))
    error_message = "region must be a Nebius region such as \"eu-north1\", \"eu-west1\" or \"us-central1\"."
  }
}

variable "labels" {
  description = "Labels of every resource (rlinfra-profile; rlinfra-cluster and managed-by = rlinfra are added)."
  type        = map(string)
  default     = {}
}

# --- network --------------------------------------------------------------------------------------

variable "existing_subnet_id" {
  description = "Put the cluster in this existing subnet (\"vpcsubnet-...\") instead of a new network; only the security group is made then, in its network."
  type        = string
  default     = null
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnet (/16 to /28), from the new network's pools; null uses the network's pools."
  type        = string
  default     = null
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

variable "platform" {
  description = "Compute platform of every node: \"gpu-h100-sxm\", \"gpu-h200-sxm\", ..., or a CPU platform such as \"cpu-d3\"."
  type        = string
}

variable "preset" {
  description = "Preset of the platform: \"1gpu-16vcpu-200gb\", \"8gpu-128vcpu-1600gb\", ..., or \"8vcpu-32gb\" on a CPU platform."
  type        = string
}

variable "infiniband_fabric" {
  description = "InfiniBand fabric of a GPU cluster for the nodes (8-GPU presets only); null makes none."
  type        = string
  default     = null
}

variable "image_family" {
  description = "Image family of the boot disks (Ubuntu 22.04 with CUDA 12 by default)."
  type        = string
  default     = "ubuntu22.04-cuda12"
}

variable "boot_disk_size_gb" {
  description = "Size of every boot disk in GiB."
  type        = number
  default     = 200
}

variable "public_ip" {
  description = "Give each node a public IPv4 address for SSH from the controller."
  type        = bool
  default     = true
}

variable "ssh_user" {
  description = "User that cloud-init makes on every node with the deployment's key."
  type        = string
  default     = "ubuntu"
}

variable "ssh_public_key" {
  description = "The deployment's OpenSSH public key."
  type        = string
}

variable "spot" {
  description = "Run the nodes as preemptible VMs (stopped when preempted)."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket (made by the storage root) that the nodes use; null: none. Its S3 access keys reach the nodes over SSH, not through Terraform."
  type        = string
  default     = null
}
