output "network" {
  description = "The cluster's network and subnetwork (self links), the subnetwork's region, and the network tag that the firewall rules select nodes by (when node_service_account is null). Available once the firewall rules exist."
  value = {
    network    = local.network
    subnetwork = local.subnetwork
    region     = local.create ? google_compute_subnetwork.this[0].region : data.google_compute_subnetwork.existing[0].region
    node_tag   = local.node_tag
  }

  # Nodes placed in the subnetwork must find the rules that let members talk already there.
  depends_on = [google_compute_firewall.internal, google_compute_firewall.external, google_compute_firewall.clients]
}

output "firewall_rules" {
  description = "Names of the firewall rules made: the members' rule, then the SSH and service ports rule when allowed_cidrs is not empty, then one rule per service_clients port, <name>-clients-<port> (sorted by the port as text)."
  value       = concat([google_compute_firewall.internal.name], google_compute_firewall.external[*].name, [for rule in google_compute_firewall.clients : rule.name])
}
