// CanopyReplication: see Package.swift for its role.
