# --- provider -------------------------------------------------------------------------------------

variable "region" {
  description = "AWS region of the cluster, e.g. \"us-east-1\". Credentials come from the environment (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...), never from variables."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", var.region))
    error_message = "region must be an AWS region name such as \"us-east-1\" or \"eu-west-1\"."
  }
}

variable "endpoints" {
  description = "Service endpoint URLs by service (keys: ec2, s3, sts, iam), for an AWS API emulator. Empty uses AWS itself; non-empty also turns on path-style S3 and skips the credential, metadata and account-id checks."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for service in keys(var.endpoints) : contains(["ec2", "s3", "sts", "iam"], service)])
    error_message = "endpoints keys must be among: ec2, s3, sts, iam."
  }

  validation {
    condition     = alltrue([for url in values(var.endpoints) : can(regex("^https?://", url))])
    error_message = "endpoints values must be URLs starting with http:// or https://."
  }
}

variable "max_retries" {
  description = "Most times the provider retries a failed API call (low against an emulator, so that unimplemented calls fail fast)."
  type        = number
  default     = 25

  validation {
    condition     = floor(var.max_retries) == var.max_retries && var.max_retries >= 0 && var.max_retries <= 100
    error_message = "max_retries must be a whole number from 0 to 100."
  }
}

variable "tags" {
  description = "Tags for every resource, as provider default_tags and module tags (rlinfra:cluster, rlinfra:profile, managed-by = rlinfra)."
  type        = map(string)
  default     = {}
}

# --- network --------------------------------------------------------------------------------------

variable "availability_zone" {
  description = "Availability zone of the new subnet, e.g. \"us-east-1a\" (the zone the instance type was checked in). Ignored with existing_subnet_id."
  type        = string
  default     = null
}

variable "existing_subnet_id" {
  description = "Put the cluster in this existing subnet instead of a new VPC; null creates VPC, subnet, internet gateway and route."
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "IPv4 range of the new VPC."
  type        = string
  default     = "10.42.0.0/16"
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnet inside vpc_cidr; null takes its first /24."
  type        = string
  default     = null
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

variable "instance_type" {
  description = "EC2 instance type of every node, chosen from rlinfra's catalog."
  type        = string
}

variable "ami" {
  description = "AMI id; null looks up the current AWS Deep Learning GPU AMI (Ubuntu 22.04), or Ubuntu 22.04 for CPU types."
  type        = string
  default     = null
}

variable "ssh_public_key" {
  description = "The deployment's OpenSSH public key, imported as its key pair."
  type        = string
}

variable "public_ip" {
  description = "Give each node a public IPv4 address for SSH from the controller."
  type        = bool
  default     = true
}

variable "allowed_cidrs" {
  description = "IPv4 ranges that may reach SSH and service_ports."
  type        = list(string)
  default     = []
}

variable "allow_public" {
  description = "Allow a /0 range (the whole internet) in allowed_cidrs."
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

variable "placement_group" {
  description = "Put the nodes in a cluster placement group when there is more than one."
  type        = bool
  default     = true
}

variable "efa" {
  description = "Give each node an Elastic Fabric Adapter (types that support it only)."
  type        = bool
  default     = false
}

variable "spot" {
  description = "Run the nodes as one-time spot instances."
  type        = bool
  default     = false
}

variable "spot_max_price" {
  description = "Highest hourly spot price in USD; null caps at the on-demand price."
  type        = number
  default     = null
}

variable "root_volume" {
  description = "Root EBS volume of every node (encrypted): size in GiB, type, optional iops and throughput."
  type = object({
    size_gb    = optional(number, 200)
    type       = optional(string, "gp3")
    iops       = optional(number)
    throughput = optional(number)
  })
  default = {}
}

variable "detailed_monitoring" {
  description = "Detailed (1-minute) CloudWatch monitoring of the instances."
  type        = bool
  default     = false
}

variable "bucket_name" {
  description = "Checkpoint bucket (made by the storage root) that the nodes' IAM role may use; null grants none."
  type        = string
  default     = null
}
