# A cluster network: a new VPC with one public subnet (internet gateway and default route), or an
# existing subnet given by id, in which case nothing is created and its VPC is looked up.

locals {
  create = var.existing_subnet_id == null

  vpc_prefix  = tonumber(split("/", var.vpc_cidr)[1])
  subnet_cidr = coalesce(var.subnet_cidr, local.vpc_prefix < 24 ? cidrsubnet(var.vpc_cidr, 24 - local.vpc_prefix, 0) : var.vpc_cidr)
}

data "aws_subnet" "existing" {
  count = local.create ? 0 : 1

  id = var.existing_subnet_id
}

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:VPC flow logs need a log group or bucket and a role; the cluster's own security group is the boundary, and an operator who wants flow logs brings a subnet (existing_subnet_id) from a VPC that has them.
  count = local.create ? 1 : 0

  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = merge(var.tags, { Name = var.name })
}

# The VPC's default security group keeps no rules, so nothing joins it by accident.
resource "aws_default_security_group" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-default" })
}

resource "aws_subnet" "this" {
  count = local.create ? 1 : 0

  vpc_id            = aws_vpc.this[0].id
  cidr_block        = local.subnet_cidr
  availability_zone = var.availability_zone

  # Public addresses are asked for per instance (aws_cluster's public_ip), not by the subnet.
  map_public_ip_on_launch = false

  tags = merge(var.tags, { Name = var.name })
}

resource "aws_internet_gateway" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = var.name })
}

resource "aws_route_table" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = var.name })
}

resource "aws_route" "internet" {
  count = local.create ? 1 : 0

  route_table_id         = aws_route_table.this[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "this" {
  count = local.create ? 1 : 0

  subnet_id      = aws_subnet.this[0].id
  route_table_id = aws_route_table.this[0].id
}
