variable "cluster_name" {
  description = "Name of the cluster; prefixes every host and link."
  type        = string
}

variable "node_count" {
  description = "Number of hosts to create; the first is the Ray head."
  type        = number
}

variable "subnet_cidr" {
  description = "IPv4 /24 for the cluster's bridge and hosts."
  type        = string
}

variable "state_dir" {
  description = "Absolute folder that holds each host's own /opt, /tmp and sshd files."
  type        = string
}

variable "ssh_authorized_key" {
  description = "Public SSH key allowed to log in to every host."
  type        = string
}
