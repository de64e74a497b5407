variable "name" {
  description = "Name of the network, used in the Name tag of everything made (the cluster name)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name))
    error_message = "name must match ^[a-z][a-z0-9-]{0,30}$: a lowercase letter, then up to 30 lowercase letters, digits or hyphens."
  }
}

variable "availability_zone" {
  description = "Availability zone of the new subnet, e.g. \"us-east-1a\". Ignored when existing_subnet_id is set (the subnet's own zone is reported)."
  type        = string
  default     = null

  validation {
    condition     = var.availability_zone == null || can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$", var.availability_zone))
    error_message = "availability_zone must be a zone name such as \"us-east-1a\" or \"eu-west-1b\" (a region name followed by a letter)."
  }
}

variable "existing_subnet_id" {
  description = "Use this subnet (and its VPC) instead of creating a network; nothing is created then. null creates a VPC, subnet, internet gateway and route table."
  type        = string
  default     = null

  validation {
    condition     = var.existing_subnet_id == null || can(regex("^subnet-[0-9a-f]{8,17}$", var.existing_subnet_id))
    error_message = "existing_subnet_id must be null or a subnet id such as \"subnet-0123456789abcdef0\"."
  }
}

variable "vpc_cidr" {
  description = "IPv4 range of the new VPC, from /16 to /24."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition = (
      can(cidrhost(var.vpc_cidr, 0)) &&
      can(regex("^[0-9.]+/(1[6-9]|2[0-4])$", var.vpc_cidr)) &&
      try(cidrhost(var.vpc_cidr, 0) == split("/", var.vpc_cidr)[0], false)
    )
    error_message = "vpc_cidr must be an IPv4 network address with a prefix length from 16 to 24, such as \"10.42.0.0/16\"."
  }
}

variable "subnet_cidr" {
  description = "IPv4 range of the new subnet, inside vpc_cidr. null takes the first /24 of vpc_cidr (the whole vpc_cidr when it is a /24)."
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

variable "tags" {
  description = "Tags for every resource made (merged with a Name tag per resource)."
  type        = map(string)
  default     = {}
}
