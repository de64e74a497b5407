variable "name" {
  description = "Name of the network, the subnet and the security group, and the prefix of every security rule (the cluster name)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$", var.name))
    error_message = "name must match ^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens, not ending with a hyphen."
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

variable "existing_subnet_id" {
  description = "Use this subnet (\"vpcsubnet-...\") and its network instead of creating them; the security group is still made, in its network. null creates a network and a subnet."
  type        = string
  default     = null

  validation {
    condition     = var.existing_subnet_id == null || can(regex("^vpcsubnet-[a-z0-9]+$", var.existing_subnet_id))
    error_message = "existing_subnet_id must be null or a Nebius subnet id such as \"vpcsubnet-e00abc123def456\"."
  }
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnet, from /16 to /28, taken from the new network's private pools; null lets the subnet use the network's pools (Nebius's default). Ignored with existing_subnet_id."
  type        = string
  default     = null

  validation {
    condition = var.subnet_cidr == null || (
      can(regex("^[0-9.]+/(1[6-9]|2[0-8])$", var.subnet_cidr)) &&
      try(cidrhost(var.subnet_cidr, 0) == split("/", var.subnet_cidr)[0], false)
    )
    error_message = "subnet_cidr must be null or an IPv4 network address with a prefix length from 16 to 28, such as \"10.42.0.0/24\"."
  }
}

variable "allowed_cidrs" {
  description = "IPv4 ranges that may reach SSH (22) and service_ports. Nothing else is open from outside the cluster; 0.0.0.0/0 (or any /0) needs allow_public = true."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for cidr in var.allowed_cidrs :
      can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/([0-9]|[12][0-9]|3[0-2])$", cidr)) && can(cidrhost(cidr, 0))
    ])
    error_message = "allowed_cidrs must hold IPv4 ranges in CIDR notation, such as \"203.0.113.7/32\" or \"10.0.0.0/8\"."
  }

  validation {
    condition     = var.allow_public || alltrue([for cidr in var.allowed_cidrs : !endswith(cidr, "/0")])
    error_message = "allowed_cidrs opens SSH and the service ports (Ray's dashboard and job API have no authentication) to the whole internet: a /0 range such as \"0.0.0.0/0\" is refused unless allow_public = true."
  }
}

variable "allow_public" {
  description = "Allow a /0 range (the whole internet) in allowed_cidrs and service_clients. Leave false unless the service ports are protected by something else."
  type        = bool
  default     = false
}

variable "service_ports" {
  description = "TCP ports, besides SSH, that allowed_cidrs may reach (e.g. a model server). Ray's own ports need no entry: cluster members reach each other on every port."
  type        = list(number)
  default     = []

  validation {
    condition     = alltrue([for port in var.service_ports : floor(port) == port && port >= 1 && port <= 65535])
    error_message = "service_ports must hold whole port numbers from 1 to 65535."
  }
}

variable "service_clients" {
  description = "Other networks that may reach one service port each (e.g. a trainer cluster's address reaching a retrieval service on 8000), without SSH or any other port: one security rule per port and range, named <name>-clients-<port>-<range>. A /0 range needs allow_public = true."
  type = list(object({
    port  = number
    cidrs = list(string)
  }))
  default = []

  validation {
    condition = alltrue([
      for client in var.service_clients :
      floor(client.port) == client.port && client.port >= 1 && client.port <= 65535 && length(client.cidrs) > 0
    ])
    error_message = "Each service_clients entry needs a whole port number from 1 to 65535 and at least one CIDR."
  }

  validation {
    condition = alltrue(flatten([
      for client in var.service_clients : [
        for cidr in client.cidrs :
        can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/([0-9]|[12][0-9]|3[0-2])$", cidr)) && can(cidrhost(cidr, 0))
      ]
    ]))
    error_message = "service_clients CIDRs must be IPv4 ranges in CIDR notation, such as \"198.51.100.0/24\"."
  }

  validation {
    condition     = var.allow_public || alltrue(flatten([for client in var.service_clients : [for cidr in client.cidrs : !endswith(cidr, "/0")]]))
    error_message = "service_clients opens a service port to the whole internet: a /0 range such as \"0.0.0.0/0\" is refused unless allow_public = true."
  }
}

variable "labels" {
  description = "Labels of the network, subnet, security group and rules; rlinfra passes rlinfra-cluster, rlinfra-profile and managed-by. Keys and values: lowercase letters, digits, _ and -."
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
