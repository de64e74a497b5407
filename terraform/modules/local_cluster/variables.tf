variable "cluster_name" {
  description = "Name of the cluster. Nodes are named \"<cluster_name>-<rank>\"; bridge, namespace and link names derive from a short hash of it."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.cluster_name))
    error_message = "cluster_name must match ^[a-z][a-z0-9-]{0,30}$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens."
  }
}

variable "node_count" {
  description = "Number of hosts, head first (rank 0)."
  type        = number
  default     = 1

  validation {
    condition     = floor(var.node_count) == var.node_count && var.node_count >= 1 && var.node_count <= 64
    error_message = "node_count must be a whole number from 1 to 64."
  }
}

variable "subnet_cidr" {
  description = "IPv4 /24 for the cluster bridge, e.g. \"10.213.250.0/24\". The gateway .1 sits on the bridge; node i gets .(10+i)."
  type        = string

  validation {
    condition = (
      can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/24$", var.subnet_cidr)) &&
      try(cidrhost(var.subnet_cidr, 0) == split("/", var.subnet_cidr)[0], false)
    )
    error_message = "subnet_cidr must be an IPv4 network address with prefix length 24, such as \"10.213.250.0/24\"."
  }
}

variable "state_dir" {
  description = "Absolute path of the folder that holds one folder per node (its /opt, /tmp and sshd files)."
  type        = string

  validation {
    condition     = can(regex("^/[^[:space:]]*$", var.state_dir)) && !can(regex("(^|/)\\.\\.(/|$)", var.state_dir))
    error_message = "state_dir must be an absolute path (starting with \"/\") without whitespace or \"..\" parts."
  }
}

variable "ssh_authorized_key" {
  description = "One OpenSSH public key (\"ssh-ed25519 AAAA... comment\") allowed to log in as root on every node."
  type        = string

  validation {
    condition     = can(regex("^(ssh-[a-z0-9-]+|ecdsa-sha2-[a-z0-9-]+|sk-[a-z0-9@.-]+) [A-Za-z0-9+/=]+( [^\\n]*)?$", trimspace(var.ssh_authorized_key)))
    error_message = "ssh_authorized_key must be a single OpenSSH public key line, such as \"ssh-ed25519 AAAA... comment\"."
  }
}

variable "node_disk_size" {
  description = "Size limit of each node's /opt and /tmp, each a tmpfs (RAM, used only as filled), such as \"4g\"; \"\" keeps them as plain folders on the machine's disk."
  type        = string
  default     = "4g"

  validation {
    condition     = can(regex("^([1-9][0-9]*[kmg])?$", var.node_disk_size))
    error_message = "node_disk_size must be empty or a size such as \"512m\" or \"4g\" (digits, then k, m or g)."
  }
}
