"""Contracts: the input domain, postconditions and execution constraints a kernel must keep."""

from kernelgate.contract.derive import derive_contract
from kernelgate.contract.load import load_contract
from kernelgate.contract.spec import CONTRACT_SCHEMA, Contract, Dim, TensorSpec

__all__ = ["CONTRACT_SCHEMA", "Contract", "Dim", "TensorSpec", "derive_contract", "load_contract"]
