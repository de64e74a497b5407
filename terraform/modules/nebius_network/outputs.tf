output "network" {
  description = "The cluster's network, subnet and security group ids. Available once the security rules exist."
  value = {
    network_id        = local.network_id
    subnet_id         = local.subnet_id
    security_group_id = nebius_vpc_v1_security_group.this.id
  }

  # Nodes attached to the security group must find the rules that let members talk already there.
  depends_on = [
    nebius_vpc_v1_security_rule.internal,
    nebius_vpc_v1_security_rule.egress,
    nebius_vpc_v1_security_rule.external,
    nebius_vpc_v1_security_rule.clients,
  ]
}

output "security_rules" {
  description = "Names of the security rules made: <name>-internal, <name>-egress, then <name>-ssh-<range>-<chunk> for each allowed range and chunk of 8 ports, then <name>-clients-<port>-<range> for each service_clients port and range (in the order of their keys)."
  value = concat(
    [nebius_vpc_v1_security_rule.internal.name, nebius_vpc_v1_security_rule.egress.name],
    [for rule in nebius_vpc_v1_security_rule.external : rule.name],
    [for rule in nebius_vpc_v1_security_rule.clients : rule.name],
  )
}
