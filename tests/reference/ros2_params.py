"""A ROS 2 parameter client over Cyclone DDS, without ROS 2: the check of the node's six
`rcl_interfaces` services and `/parameter_events` (ros2/tests/it/live.rs).

    python ros2_params.py --domain D --node /seg/segmenter

Discovers the node's services (`rq/<node>/<service>Request`, `rr/<node>/<service>Reply`,
ROS 2's type names `rcl_interfaces::srv::dds_::<Service>_Request_` and `_Response_`),
then: list_parameters, get_parameter_types and get_parameters of every name,
describe_parameters, set_parameters of `model` (a read-only one) and of `alpha`,
set_parameters_atomically of `diagnostics_period`, get_parameters of `alpha` again, and
listens on `/parameter_events`. Prints one JSON object with what each call answered.
"""
import argparse
import json
import time
from dataclasses import dataclass

from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import float64, int32, int64, sequence, uint8, uint32, uint64
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

P = "rcl_interfaces::msg::dds_::"
S = "rcl_interfaces::srv::dds_::"


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32
    nanosec: uint32


@dataclass
class ParameterValue(IdlStruct, typename=P + "ParameterValue_"):
    type: uint8
    bool_value: bool
    integer_value: int64
    double_value: float64
    string_value: str
    byte_array_value: sequence[uint8]
    bool_array_value: sequence[bool]
    integer_array_value: sequence[int64]
    double_array_value: sequence[float64]
    string_array_value: sequence[str]


@dataclass
class Parameter(IdlStruct, typename=P + "Parameter_"):
    name: str
    value: ParameterValue


@dataclass
class SetParametersResult(IdlStruct, typename=P + "SetParametersResult_"):
    successful: bool
    reason: str


@dataclass
class FloatingPointRange(IdlStruct, typename=P + "FloatingPointRange_"):
    from_value: float64
    to_value: float64
    step: float64


@dataclass
class IntegerRange(IdlStruct, typename=P + "IntegerRange_"):
    from_value: int64
    to_value: int64
    step: uint64


@dataclass
class ParameterDescriptor(IdlStruct, typename=P + "ParameterDescriptor_"):
    name: str
    type: uint8
    description: str
    additional_constraints: str
    read_only: bool
    dynamic_typing: bool
    floating_point_range: sequence[FloatingPointRange, 1]
    integer_range: sequence[IntegerRange, 1]


@dataclass
class ListParametersResult(IdlStruct, typename=P + "ListParametersResult_"):
    names: sequence[str]
    prefixes: sequence[str]


@dataclass
class ParameterEvent(IdlStruct, typename=P + "ParameterEvent_"):
    stamp: Time
    node: str
    new_parameters: sequence[Parameter]
    changed_parameters: sequence[Parameter]
    deleted_parameters: sequence[Parameter]


@dataclass
class ListParametersRequest(IdlStruct, typename=S + "ListParameters_Request_"):
    prefixes: sequence[str]
    depth: uint64


@dataclass
class ListParametersResponse(IdlStruct, typename=S + "ListParameters_Response_"):
    result: ListParametersResult


@dataclass
class GetParametersRequest(IdlStruct, typename=S + "GetParameters_Request_"):
    names: sequence[str]


@dataclass
class GetParametersResponse(IdlStruct, typename=S + "GetParameters_Response_"):
    values: sequence[ParameterValue]


@dataclass
class GetParameterTypesRequest(IdlStruct, typename=S + "GetParameterTypes_Request_"):
    names: sequence[str]


@dataclass
class GetParameterTypesResponse(IdlStruct, typename=S + "GetParameterTypes_Response_"):
    types: sequence[uint8]


@dataclass
class DescribeParametersRequest(IdlStruct, typename=S + "DescribeParameters_Request_"):
    names: sequence[str]


@dataclass
class DescribeParametersResponse(IdlStruct, typename=S + "DescribeParameters_Response_"):
    descriptors: sequence[ParameterDescriptor]


@dataclass
class SetParametersRequest(IdlStruct, typename=S + "SetParameters_Request_"):
    parameters: sequence[Parameter]


@dataclass
class SetParametersResponse(IdlStruct, typename=S + "SetParameters_Response_"):
    results: sequence[SetParametersResult]


@dataclass
class SetParametersAtomicallyRequest(IdlStruct, typename=S + "SetParametersAtomically_Request_"):
    parameters: sequence[Parameter]


@dataclass
class SetParametersAtomicallyResponse(IdlStruct,
                                      typename=S + "SetParametersAtomically_Response_"):
    result: SetParametersResult


ListParameters = (ListParametersRequest, ListParametersResponse)
GetParameters = (GetParametersRequest, GetParametersResponse)
GetParameterTypes = (GetParameterTypesRequest, GetParameterTypesResponse)
DescribeParameters = (DescribeParametersRequest, DescribeParametersResponse)
SetParameters = (SetParametersRequest, SetParametersResponse)
SetParametersAtomically = (SetParametersAtomicallyRequest, SetParametersAtomicallyResponse)

QOS = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(10),
          Policy.DataRepresentation(use_cdrv0_representation=True))


def value(v):
    """A ParameterValue as a plain Python value."""
    return {1: v.bool_value, 2: v.integer_value, 3: v.double_value, 4: v.string_value,
            9: list(v.string_array_value)}.get(v.type)


def double(x):
    return ParameterValue(3, False, 0, x, "", [], [], [], [], [])


def string(x):
    return ParameterValue(4, False, 0, 0.0, x, [], [], [], [], [])


class Client:
    def __init__(self, dp, node, srv, types, timeout):
        req, rep = types
        self.writer = DataWriter(dp, Topic(dp, f"rq{node}/{srv}Request", req, qos=QOS), qos=QOS)
        self.reader = DataReader(dp, Topic(dp, f"rr{node}/{srv}Reply", rep, qos=QOS), qos=QOS)
        self.req, self.timeout = req, timeout
        t0 = time.time()
        while time.time() - t0 < timeout:
            if (self.writer.get_matched_subscriptions() and
                    self.reader.get_matched_publications()):
                return
            time.sleep(0.05)
        raise SystemExit(f"service {node}/{srv} not discovered in {timeout} s")

    def call(self, **fields):
        self.writer.write(self.req(**fields))
        t0 = time.time()
        while time.time() - t0 < self.timeout:
            for sample in self.reader.take(N=10):
                return sample
            time.sleep(0.02)
        raise SystemExit(f"no reply from {self.req.__name__} in {self.timeout} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", type=int, required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--timeout", type=float, default=15.0)
    a = ap.parse_args()
    dp = DomainParticipant(a.domain)
    events = DataReader(dp, Topic(dp, "rt/parameter_events", ParameterEvent, qos=QOS), qos=QOS)
    clients = {srv: Client(dp, a.node, srv, types, a.timeout) for srv, types in [
        ("list_parameters", ListParameters), ("get_parameters", GetParameters),
        ("get_parameter_types", GetParameterTypes), ("describe_parameters", DescribeParameters),
        ("set_parameters", SetParameters), ("set_parameters_atomically", SetParametersAtomically)]}
    out = {}
    names = list(clients["list_parameters"].call(prefixes=[], depth=0).result.names)
    out["names"] = names
    out["types"] = list(clients["get_parameter_types"].call(names=names).types)
    out["values"] = [value(v) for v in clients["get_parameters"].call(names=names).values]
    out["descriptions"] = {d.name: [d.description, d.read_only]
                           for d in clients["describe_parameters"].call(names=names).descriptors}
    refused = clients["set_parameters"].call(
        parameters=[Parameter("model", string("other.onnx"))]).results[0]
    out["set_model"] = [refused.successful, refused.reason]
    done = clients["set_parameters"].call(parameters=[Parameter("alpha", double(0.25))]).results[0]
    out["set_alpha"] = [done.successful, done.reason]
    atomic = clients["set_parameters_atomically"].call(
        parameters=[Parameter("diagnostics_period", double(0.25))]).result
    out["set_period_atomically"] = [atomic.successful, atomic.reason]
    out["alpha_after"] = value(clients["get_parameters"].call(names=["alpha"]).values[0])
    changed = []
    t0 = time.time()
    while time.time() - t0 < 3 and not any(n == "alpha" for n, _ in changed):
        for e in events.take(N=20):
            changed += [(p.name, value(p.value)) for p in e.changed_parameters]
        time.sleep(0.05)
    out["events"] = changed
    print(json.dumps(out))


if __name__ == "__main__":
    main()
