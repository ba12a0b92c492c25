"""Writes the test models. sklearn_like_int.onnx and sklearn_like_str.onnx: a 3-class linear
classifier shaped exactly as skl2onnx exports a scikit-learn
LogisticRegression (ai.onnx.ml LinearClassifier, then Normalizer-free
softmax via post_transform, then ZipMap), with int64 and with string class
labels. Needs only the onnx package:

    python3 infer/testdata/make_sklearn_like.py infer/testdata
"""
import sys

import onnx
from onnx import TensorProto, helper

COEF = [1.0, -0.5, 0.25, -1.0, 0.5, 0.75, 0.2, 0.1, -0.6]  # 3 classes x 3 features
INTERCEPT = [0.1, -0.2, 0.05]


def model(labels):
    strings = isinstance(labels[0], str)
    clf_attrs = {"coefficients": COEF, "intercepts": INTERCEPT, "multi_class": 1, "post_transform": "SOFTMAX"}
    zip_attrs = {}
    if strings:
        clf_attrs["classlabels_strings"] = labels
        zip_attrs["classlabels_strings"] = labels
        label_type = TensorProto.STRING
        key_type = TensorProto.STRING
    else:
        clf_attrs["classlabels_ints"] = labels
        zip_attrs["classlabels_int64s"] = labels
        label_type = TensorProto.INT64
        key_type = TensorProto.INT64
    nodes = [
        helper.make_node("LinearClassifier", ["float_input"], ["label", "probability_tensor"], domain="ai.onnx.ml", name="LinearClassifier", **clf_attrs),
        helper.make_node("Identity", ["label"], ["output_label"], name="Identity"),
        helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain="ai.onnx.ml", name="ZipMap", **zip_attrs),
    ]
    map_type = onnx.TypeProto()
    map_type.map_type.key_type = key_type
    map_type.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    seq_map = helper.make_sequence_type_proto(map_type)
    graph = helper.make_graph(
        nodes,
        "sklearn_like",
        [helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 3])],
        [
            helper.make_tensor_value_info("output_label", label_type, [None]),
            helper.make_value_info("output_probability", seq_map),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)], producer_name="skl2onnx-like")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


out = sys.argv[1] if len(sys.argv) > 1 else "."
onnx.save(model([0, 1, 2]), out + "/sklearn_like_int.onnx")
onnx.save(model(["setosa", "versicolor", "virginica"]), out + "/sklearn_like_str.onnx")

# Models ONNX Runtime cannot run: an operator of a custom domain, and Gelu,
# which entered the default domain at opset 20, imported at opset 13.
x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])
y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 3])
for fname, node, opsets in [
    ("unsupported_op.onnx", helper.make_node("Foo", ["X"], ["Y"], domain="com.example.custom"), [helper.make_opsetid("", 13), helper.make_opsetid("com.example.custom", 1)]),
    ("gelu13.onnx", helper.make_node("Gelu", ["X"], ["Y"]), [helper.make_opsetid("", 13)]),
]:
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets)
    m.ir_version = 8
    onnx.save(m, out + "/" + fname)
