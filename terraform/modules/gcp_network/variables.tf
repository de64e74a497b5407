variable "name" {
  description = "Name of the network, the subnetwork and the prefix of every firewall rule (the cluster name)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$", var.name))
    error_message = "name must match ^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens, not ending with a hyphen (Compute Engine names)."
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

variable "region" {
  description = "Region of the new subnetwork, e.g. \"us-central1\" (the region of the cluster's zone). Ignored with existing_subnetwork (its own region is reported)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]{1,2}$", var.region))
    error_message = "region must be a Compute Engine region such as \"us-central1\" or \"europe-west4\"."
  }
}

variable "existing_subnetwork" {
  description = "Use this subnetwork (and its network) instead of creating one: a self link or \"projects/P/regions/R/subnetworks/S\". The firewall rules are still made, in its network. null creates a network and a subnetwork."
  type        = string
  default     = null

  validation {
    condition     = var.existing_subnetwork == null || can(regex("^(https://www\\.googleapis\\.com/compute/v1/)?projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/regions/[a-z]+-[a-z]+[0-9]{1,2}/subnetworks/[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", var.existing_subnetwork))
    error_message = "existing_subnetwork must be null, a subnetwork self link, or \"projects/PROJECT/regions/REGION/subnetworks/NAME\"."
  }
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnetwork, from /16 to /28."
  type        = string
  default     = "10.42.0.0/24"

  validation {
    condition = (
      can(regex("^[0-9.]+/(1[6-9]|2[0-8])$", var.subnet_cidr)) &&
      try(cidrhost(var.subnet_cidr, 0) == split("/", var.subnet_cidr)[0], false)
    )
    error_message = "subnet_cidr must be an IPv4 network address with a prefix length from 16 to 28, such as \"10.42.0.0/24\"."
  }
}

variable "mtu" {
  description = "MTU of the new network in bytes. 8896 (jumbo frames) helps NCCL over TCP between nodes; 1460 is Google's historical default."
  type        = number
  default     = 8896

  validation {
    condition     = floor(var.mtu) == var.mtu && var.mtu >= 1300 && var.mtu <= 8896
    error_message = "mtu must be a whole number from 1300 to 8896."
  }
}

variable "node_service_account" {
  description = "Email of the nodes' service account (gcp_cluster's service_account.email). When set, the firewall rules select the nodes by this service account (only principals allowed to act as it can join); null selects them by the network tag in the node_tag output."
  type        = string
  default     = null

  validation {
    condition     = var.node_service_account == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.-]+\\.gserviceaccount\\.com$", var.node_service_account))
    error_message = "node_service_account must be null or a service account email such as \"c1-nodes@my-project.iam.gserviceaccount.com\"."
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
  description = "Other networks that may reach one service port each (e.g. a trainer cluster's address reaching a retrieval service on 8000), without SSH or any other port: one firewall rule per port, named <name>-clients-<port>. A /0 range needs allow_public = true."
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
