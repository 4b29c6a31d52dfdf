// CanopyCrypto: see Package.swift for its role.
