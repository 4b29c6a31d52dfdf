// CanopyStore: see Package.swift for its role.
