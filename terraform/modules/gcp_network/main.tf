# A cluster network: a new VPC network with one subnetwork, or an existing subnetwork given by its
# path (then only the firewall rules are made, in its network). Firewall rules: all traffic between
# the cluster's own nodes, SSH plus the listed service ports from allowed_cidrs only, and one port
# per service_clients entry from that entry's ranges only (other clusters using a service). A new
# VPC network has no other ingress rule (ingress is denied unless a rule allows it); egress is open.

locals {
  create = var.existing_subnetwork == null

  # The nodes carry this network tag (gcp_cluster's network_tags); rules select them by it unless
  # node_service_account is set.
  node_tag = "${var.name}-node"
  by_tag   = var.node_service_account == null

  # SSH first, then each service port once.
  ports = distinct(concat([22], var.service_ports))

  # One rule per client port, keyed by the port so that adding or removing a client leaves the
  # other rules in place; entries that name the same port share its rule (their ranges merged).
  client_ranges = {
    for port, ranges in { for client in var.service_clients : tostring(client.port) => client.cidrs... } :
    port => sort(distinct(flatten(ranges)))
  }
}

data "google_compute_subnetwork" "existing" {
  count = local.create ? 0 : 1

  self_link = var.existing_subnetwork
}

resource "google_compute_network" "this" {
  count = local.create ? 1 : 0

  project                 = var.project
  name                    = var.name
  description             = "rlinfra cluster ${var.name} (managed by rlinfra)"
  auto_create_subnetworks = false
  routing_mode            = "REGIONAL"
  mtu                     = var.mtu

  # The network's default route to the internet stays: nodes download packages, wheels and
  # model weights, and reach Cloud Storage.
  delete_default_routes_on_create = false
}

resource "google_compute_subnetwork" "this" {
  #checkov:skip=CKV_GCP_26:VPC flow logs are billed per GB logged; the firewall rules are the boundary, and an operator who wants flow logs brings a subnetwork (existing_subnetwork) that has them.
  #checkov:skip=CKV_GCP_76:The subnetwork is IPv4 only (stack_type IPV4_ONLY); private Google access is on for IPv4.
  count = local.create ? 1 : 0

  project                  = var.project
  name                     = var.name
  description              = "rlinfra cluster ${var.name} (managed by rlinfra)"
  region                   = var.region
  network                  = google_compute_network.this[0].id
  ip_cidr_range            = var.subnet_cidr
  stack_type               = "IPV4_ONLY"
  private_ip_google_access = true # nodes without a public address still reach Cloud Storage
}

locals {
  network    = local.create ? google_compute_network.this[0].self_link : data.google_compute_subnetwork.existing[0].network
  subnetwork = local.create ? google_compute_subnetwork.this[0].self_link : data.google_compute_subnetwork.existing[0].self_link
  # Firewall rules live in the network's project (the host project of a shared VPC).
  network_project = local.create ? var.project : data.google_compute_subnetwork.existing[0].project
}

# --- firewall -------------------------------------------------------------------------------------

# The rules name the network resource itself rather than local.network (the same value), so that
# scanners following references from resource to resource (checkov's CKV2_GCP_18) see them attached.

resource "google_compute_firewall" "internal" {
  project     = local.network_project
  name        = "${var.name}-internal"
  description = "rlinfra cluster ${var.name}: all traffic between members (Ray GCS, object store, NCCL)"
  network     = local.create ? google_compute_network.this[0].self_link : data.google_compute_subnetwork.existing[0].network
  direction   = "INGRESS"
  priority    = 1000

  allow {
    protocol = "all"
  }

  source_tags             = local.by_tag ? [local.node_tag] : null
  target_tags             = local.by_tag ? [local.node_tag] : null
  source_service_accounts = local.by_tag ? null : [var.node_service_account]
  target_service_accounts = local.by_tag ? null : [var.node_service_account]
}

# SSH and each service port, from the allowed ranges only (no rule when allowed_cidrs is empty).
resource "google_compute_firewall" "external" {
  count = length(var.allowed_cidrs) > 0 ? 1 : 0

  project     = local.network_project
  name        = "${var.name}-ssh-and-services"
  description = "rlinfra cluster ${var.name}: SSH and service ports from allowed ranges only"
  network     = local.create ? google_compute_network.this[0].self_link : data.google_compute_subnetwork.existing[0].network
  direction   = "INGRESS"
  priority    = 1000

  allow {
    protocol = "tcp"
    ports    = [for port in local.ports : tostring(port)]
  }

  source_ranges           = var.allowed_cidrs
  target_tags             = local.by_tag ? [local.node_tag] : null
  target_service_accounts = local.by_tag ? null : [var.node_service_account]
}

# Each client port, from that port's client ranges only: no SSH, no other port.
resource "google_compute_firewall" "clients" {
  for_each = local.client_ranges

  project     = local.network_project
  name        = "${var.name}-clients-${each.key}"
  description = "rlinfra cluster ${var.name}: service port ${each.key} from client networks only"
  network     = local.create ? google_compute_network.this[0].self_link : data.google_compute_subnetwork.existing[0].network
  direction   = "INGRESS"
  priority    = 1000

  allow {
    protocol = "tcp"
    ports    = [each.key]
  }

  source_ranges           = each.value
  target_tags             = local.by_tag ? [local.node_tag] : null
  target_service_accounts = local.by_tag ? null : [var.node_service_account]
}
