# A cluster network on Nebius: a new VPC network with one subnet, or an existing subnet given by its
# id (then only the security group is made, in its network), and the security group that every
# node's interface carries. Its rules: all traffic between members, SSH plus the listed service
# ports from allowed_cidrs only, one port per service_clients entry from that entry's ranges only,
# and all egress. Every rule allows; traffic that no rule allows is not let through.

locals {
  create = var.existing_subnet_id == null

  # SSH first, then each service port once. A Nebius rule names at most 8 ports and 8 CIDRs, so
  # the ports are cut into chunks of 8 and each allowed range gets a rule per chunk.
  ports       = distinct(concat([22], var.service_ports))
  port_chunks = chunklist(local.ports, 8)

  # Keyed by range and chunk: adding or removing a range leaves the other ranges' rules alone.
  external_rules = {
    for pair in setproduct(distinct(var.allowed_cidrs), range(length(local.port_chunks))) :
    "${pair[0]} ${pair[1]}" => {
      cidr  = pair[0]
      ports = local.port_chunks[pair[1]]
      name  = "${var.name}-ssh-${replace(replace(pair[0], ".", "-"), "/", "-")}-${pair[1]}"
    }
  }

  # One rule per client port and range ("<port> <cidr>"), so that adding or removing a client
  # leaves the other rules in place; entries naming the same port and range share one rule.
  client_keys = distinct(flatten([
    for client in var.service_clients : [for cidr in client.cidrs : "${client.port} ${cidr}"]
  ]))
  client_rules = {
    for key in local.client_keys : key => {
      port = tonumber(split(" ", key)[0])
      cidr = split(" ", key)[1]
      name = "${var.name}-clients-${split(" ", key)[0]}-${replace(replace(split(" ", key)[1], ".", "-"), "/", "-")}"
    }
  }
}

data "nebius_vpc_v1_subnet" "existing" {
  count = local.create ? 0 : 1

  id = var.existing_subnet_id
}

resource "nebius_vpc_v1_network" "this" {
  count = local.create ? 1 : 0

  parent_id = var.parent_id
  name      = var.name
  labels    = var.labels
}

resource "nebius_vpc_v1_subnet" "this" {
  count = local.create ? 1 : 0

  parent_id  = var.parent_id
  name       = var.name
  network_id = nebius_vpc_v1_network.this[0].id
  labels     = var.labels

  # The network's own private pools, or one range of them when subnet_cidr is set.
  ipv4_private_pools = {
    use_network_pools = var.subnet_cidr == null
    pools             = var.subnet_cidr == null ? null : [{ cidrs = [{ cidr = var.subnet_cidr }] }]
  }
}

locals {
  network_id = local.create ? nebius_vpc_v1_network.this[0].id : data.nebius_vpc_v1_subnet.existing[0].network_id
  subnet_id  = local.create ? nebius_vpc_v1_subnet.this[0].id : data.nebius_vpc_v1_subnet.existing[0].id
}

# --- security group -------------------------------------------------------------------------------

resource "nebius_vpc_v1_security_group" "this" {
  parent_id  = var.parent_id
  name       = var.name
  network_id = local.network_id
  labels     = var.labels
}

# Members reach each other on every protocol and port (Ray's GCS and object store, NCCL).
resource "nebius_vpc_v1_security_rule" "internal" {
  parent_id = nebius_vpc_v1_security_group.this.id
  name      = "${var.name}-internal"
  access    = "ALLOW"
  protocol  = "ANY"
  type      = "STATEFUL"
  priority  = 100
  labels    = var.labels

  ingress = {
    source_security_group_id = nebius_vpc_v1_security_group.this.id
  }
}

# Nodes reach the internet: packages, wheels, model weights, Object Storage.
resource "nebius_vpc_v1_security_rule" "egress" {
  parent_id = nebius_vpc_v1_security_group.this.id
  name      = "${var.name}-egress"
  access    = "ALLOW"
  protocol  = "ANY"
  type      = "STATEFUL"
  priority  = 100
  labels    = var.labels

  egress = {
    destination_cidrs = ["0.0.0.0/0"]
  }
}

# SSH and each service port, from the allowed ranges only (no rule when allowed_cidrs is empty).
resource "nebius_vpc_v1_security_rule" "external" {
  for_each = local.external_rules

  parent_id = nebius_vpc_v1_security_group.this.id
  name      = each.value.name
  access    = "ALLOW"
  protocol  = "TCP"
  type      = "STATEFUL"
  priority  = 200
  labels    = var.labels

  ingress = {
    source_cidrs      = [each.value.cidr]
    destination_ports = each.value.ports
  }
}

# Each client port, from that port's client ranges only: no SSH, no other port.
resource "nebius_vpc_v1_security_rule" "clients" {
  for_each = local.client_rules

  parent_id = nebius_vpc_v1_security_group.this.id
  name      = each.value.name
  access    = "ALLOW"
  protocol  = "TCP"
  type      = "STATEFUL"
  priority  = 300
  labels    = var.labels

  ingress = {
    source_cidrs      = [each.value.cidr]
    destination_ports = [each.value.port]
  }
}
