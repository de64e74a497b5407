variable "cluster_name" {
  description = "Name of the cluster. Nodes are named \"<cluster_name>-<rank>\"; the key pair and security group carry this name, the IAM role and instance profile start with it."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.cluster_name))
    error_message = "cluster_name must match ^[a-z][a-z0-9-]{0,30}$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens."
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

variable "instance_type" {
  description = "EC2 instance type of every node, e.g. \"p5.48xlarge\" (rlinfra picks it from its catalog)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9-]+$", var.instance_type))
    error_message = "instance_type must be an EC2 instance type such as \"p5.48xlarge\" or \"m7i.2xlarge\" (family.size)."
  }
}

variable "ami" {
  description = "AMI id for every node. null looks up the most recent AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) for GPU families (g*, p*), or Canonical's Ubuntu 22.04 for other families."
  type        = string
  default     = null

  validation {
    condition     = var.ami == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami))
    error_message = "ami must be null (look the image up) or an AMI id such as \"ami-0123456789abcdef0\"."
  }
}

variable "vpc_id" {
  description = "VPC of the cluster's security group (aws_network's network.vpc_id)."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must be a VPC id such as \"vpc-0123456789abcdef0\"."
  }
}

variable "subnet_id" {
  description = "Subnet of every node (aws_network's network.subnet_id); it sets the availability zone."
  type        = string

  validation {
    condition     = can(regex("^subnet-[0-9a-f]{8,17}$", var.subnet_id))
    error_message = "subnet_id must be a subnet id such as \"subnet-0123456789abcdef0\"."
  }
}

variable "public_ip" {
  description = "Give each node a public IPv4 address for SSH from the controller (an Elastic IP per node when efa is on). false keeps nodes private: the controller must reach the subnet."
  type        = bool
  default     = true
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
    error_message = "allowed_cidrs opens SSH and the service ports to the whole internet: a /0 range such as \"0.0.0.0/0\" is refused unless allow_public = true."
  }
}

variable "allow_public" {
  description = "Allow a /0 range (the whole internet) in allowed_cidrs. Leave false unless the service ports are protected by something else."
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
  description = "Other networks that may reach one service port each (e.g. a trainer cluster's address reaching a retrieval service on 8000), without SSH or the other ports. A /0 range needs allow_public = true."
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
      for client in var.service_clients : [for cidr in client.cidrs : can(cidrhost(cidr, 0)) && can(regex("^[0-9.]+/[0-9]+$", cidr))]
    ]))
    error_message = "service_clients CIDRs must be IPv4 ranges in CIDR notation, such as \"198.51.100.0/24\"."
  }

  validation {
    condition     = var.allow_public || alltrue(flatten([for client in var.service_clients : [for cidr in client.cidrs : !endswith(cidr, "/0")]]))
    error_message = "service_clients opens a service port to the whole internet: a /0 range is refused unless allow_public = true."
  }
}

variable "ssh_public_key" {
  description = "One OpenSSH public key (\"ssh-ed25519 AAAA... comment\"), imported as the deployment's key pair; it logs in as ubuntu."
  type        = string

  validation {
    condition     = can(regex("^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\\n]*)?$", trimspace(var.ssh_public_key)))
    error_message = "ssh_public_key must be a single OpenSSH public key line of type ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256/384/521 (the types EC2 imports)."
  }
}

variable "placement_group" {
  description = "Put the nodes in one cluster placement group (only made when node_count > 1). Turn off where the API has no placement groups."
  type        = bool
  default     = true
}

variable "efa" {
  description = "Give each node an Elastic Fabric Adapter as its primary network interface. Only for instance types that support EFA (see README)."
  type        = bool
  default     = false

  validation {
    condition     = !var.efa || contains(local.efa_instance_types, var.instance_type)
    error_message = "efa = true needs an instance type with EFA support; the supported types are: p5.4xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge, p4de.24xlarge, g6e/g6/g5 8xlarge to 48xlarge, and the 48xlarge sizes of m7i, c7i and r7i."
  }
}

variable "spot" {
  description = "Run the nodes as one-time spot instances (terminated on interruption)."
  type        = bool
  default     = false
}

variable "spot_max_price" {
  description = "Highest hourly spot price in USD; null caps at the on-demand price."
  type        = number
  default     = null

  validation {
    condition     = var.spot_max_price == null || try(var.spot_max_price > 0, false)
    error_message = "spot_max_price must be null (cap at the on-demand price) or a positive hourly price in USD."
  }

  validation {
    condition     = var.spot_max_price == null || var.spot
    error_message = "spot_max_price is only meaningful with spot = true."
  }
}

variable "root_volume" {
  description = "Root EBS volume of every node (always encrypted): size in GiB, type, and for gp3/io1/io2 optional iops and throughput (MiB/s, gp3 only)."
  type = object({
    size_gb    = optional(number, 200)
    type       = optional(string, "gp3")
    iops       = optional(number)
    throughput = optional(number)
  })
  default = {}

  validation {
    condition     = floor(var.root_volume.size_gb) == var.root_volume.size_gb && var.root_volume.size_gb >= 30 && var.root_volume.size_gb <= 16384
    error_message = "root_volume.size_gb must be a whole number of GiB from 30 to 16384 (the GPU images need at least 30 GiB)."
  }

  validation {
    condition     = contains(["gp3", "gp2", "io1", "io2"], var.root_volume.type)
    error_message = "root_volume.type must be one of: gp3, gp2, io1, io2."
  }

  validation {
    condition     = var.root_volume.throughput == null || var.root_volume.type == "gp3"
    error_message = "root_volume.throughput can only be set for type gp3."
  }
}

variable "detailed_monitoring" {
  description = "Turn on detailed (1-minute) CloudWatch monitoring of the instances (billed per instance)."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket the nodes may list, read, write and delete objects in (their IAM role grants that bucket and nothing else). null grants no bucket."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be null or an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit."
  }
}

variable "tags" {
  description = "Tags for every resource made (merged with a Name tag per resource); rlinfra passes rlinfra:cluster, rlinfra:profile and managed-by."
  type        = map(string)
  default     = {}
}
