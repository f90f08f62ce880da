# Seed 000's Ray example ("ray 代码"), verbatim but for Ray's own calls:
#     ray.init()
#     @ray.remote
#     results = ray.get([compute.remote(i) for i in range(10)])
# became
#     results = hpcdist.launch(hpcdist.map, compute, range(10), np=2)[0]
# hpcdist.map hands the items to the ranks as they become free; rank 0 (the first value) gets the results in order.
import hpcdist


def compute(x):
    return x**2


results = hpcdist.launch(hpcdist.map, compute, range(10), np=2)[0]
print(results)
